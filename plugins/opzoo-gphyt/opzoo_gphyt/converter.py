"""The ``gphyt`` converter: a General Physics Transformer checkpoint ``.pth`` -> opzoo ``gphyt`` weights.

A GPhyT file is ``torch.save({"samples_trained", "batches_trained", "cycle_idx", "model_state_dict",
"optimizer_state_dict", "config", ...})`` (``gphyt/run/train.py`` ``Trainer.save_checkpoint`` @ 4374116), the tensor
names prefixed by DDP's ``module.`` and ``torch.compile``'s ``_orig_mod.`` where it was trained so. Upstream reads it
with a full unpickling ``torch.load`` (weights_only off) after allow-listing ``pathlib.PosixPath``/``WindowsPath``
(``gphyt/run/run_utils.py`` ``load_stored_model``); opzoo reads it with ``weights_only=True`` and the same two path
classes allowed (building a path object runs no code), and refuses anything that needs more, before any of its code
runs. The network's sizes come from the tensor shapes, checked against the recorded ``config`` where the file has one.
"""

from __future__ import annotations

import os
import pathlib
from pathlib import Path
from typing import Any, Mapping

import torch

import opzoo
from opzoo import kit

from .provenance import pretrained_cfg

# gphyt/model/model_specs.py @ 4374116: hidden, mlp, heads, layers per size (the heads are not in the tensors)
SIZES = {
    "GPT_S": {"hidden_dim": 192, "mlp_dim": 768, "num_heads": 3, "num_layers": 12},
    "GPT_M": {"hidden_dim": 768, "mlp_dim": 3072, "num_heads": 12, "num_layers": 12},
    "GPT_L": {"hidden_dim": 1024, "mlp_dim": 4096, "num_heads": 16, "num_layers": 24},
    "GPT_XL": {"hidden_dim": 1280, "mlp_dim": 5120, "num_heads": 16, "num_layers": 32},
}
PREFIXES = ("module.", "_orig_mod.")
BLOCK_NAMES = {
    "attention.to_qkv.weight": "attention.to_qkv.weight",
    "attention.attention.in_proj_weight": "attention.attention.in_proj_weight",
    "attention.attention.in_proj_bias": "attention.attention.in_proj_bias",
    "attention.attention.out_proj.weight": "attention.attention.out_proj.weight",
    "attention.attention.out_proj.bias": "attention.attention.out_proj.bias",
    "norm1.weight": "norm1.weight", "norm1.bias": "norm1.bias", "norm2.weight": "norm2.weight",
    "norm2.bias": "norm2.bias", "mlp.mlp.0.weight": "fc1.weight", "mlp.mlp.0.bias": "fc1.bias",
    "mlp.mlp.2.weight": "fc2.weight", "mlp.mlp.2.bias": "fc2.bias",
}
GLOBAL_NAMES = {
    "tokenizer.tokenizer.to_patch_embedding.1.weight": "net.tokenize.weight",
    "tokenizer.tokenizer.to_patch_embedding.1.bias": "net.tokenize.bias",
    "init_pos_encodings.pe": "net.pos_embed",
    "detokenizer.detokenizer.from_patch_embedding.1.weight": "net.detokenize.weight",
    "detokenizer.detokenizer.from_patch_embedding.1.bias": "net.detokenize.bias",
}
BUFFERS = ("derivatives.dt_filter", "derivatives.dh_filter", "derivatives.dw_filter", "tokenizer.patch_size")


RENAMES = kit.Renames.tables(GLOBAL_NAMES, ("attention_blocks", "net.blocks", BLOCK_NAMES),
                             left_out=BUFFERS)  # the buffers: checked, then computed by opzoo
UPSTREAM_NAMES = RENAMES.inverse()


opzoo_name = RENAMES.get  # an upstream tensor's opzoo name (None: not one opzoo knows)
upstream_name = UPSTREAM_NAMES.name  # the inverse, for running upstream's network on opzoo's weights (KeyError)


def strip_prefixes(name: str) -> str:
    """Without DDP's ``module.`` and torch.compile's ``_orig_mod.`` in front (in either order)."""
    changed = True
    while changed:
        changed = False
        for prefix in PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix):], True
    return name


def read_checkpoint(path: Path, mapped: bool = False) -> tuple[dict[str, torch.Tensor], Mapping[str, Any] | None]:
    """``(model_state_dict without prefixes, the recorded config or None)``; nothing is executed. ``mapped``: the
    tensors memory-mapped, not read (for their shapes and the config only)."""
    payload = opzoo.safe_torch_load(path, allow=[pathlib.PosixPath, pathlib.WindowsPath], mapped=mapped)
    sd = kit.tensors_under(payload, "model_state_dict", str(path), "GPhyT", "upstream's Trainer")
    config = payload.get("config")
    if config is not None and not isinstance(config, Mapping):
        raise opzoo.CheckpointError(f"{path}: 'config' is a {type(config).__name__}, not the run's config dict")
    return {strip_prefixes(str(k)): v for k, v in sd.items()}, config


def to_opzoo_names(sd: Mapping[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """The network's tensors in opzoo's names, after checking the buffers upstream saves (the difference filters are
    ``[-1, 0, 1]``; opzoo computes them) and refusing what is not GPhyT's linear-tokenizer network."""
    for key in BUFFERS[:3]:
        if key in sd:
            want = torch.tensor([-1.0, 0.0, 1.0])
            if sd[key].numel() % 3 or not torch.equal(sd[key].float().reshape(-1, 3), want.expand(sd[key].numel() // 3, 3)):
                raise opzoo.CheckpointError(f"{path}: {key} is not the 2nd-order central difference [-1, 0, 1] opzoo "
                                            "computes (a 4th-order filter is not implemented)")
    out, unknown = {}, []
    for k, v in sd.items():
        if k in BUFFERS:
            continue
        name = opzoo_name(k)
        (unknown.append(k) if name is None else out.__setitem__(name, v))
    if unknown:
        conv = [k for k in unknown if "conv" in k or "tokenizer" in k]
        raise opzoo.CheckpointError(f"{path}: tensors that are not GPhyT's network with linear tokenizers and absolute "
                                    f"positions: {', '.join(unknown[:5])}"
                                    + (" (a conv_net tokenizer is not implemented by opzoo-gphyt)" if conv else ""))
    return out


def _shape(sd: Mapping[str, torch.Tensor], key: str, ndim: int, where: str) -> tuple[int, ...]:
    return kit.tensor_shape(sd, key, where, "GPhyT", ndim)


def sizes_of(sd: Mapping[str, torch.Tensor], where: str) -> dict[str, Any]:
    """The network's sizes read from its tensors (opzoo names)."""
    dim, channels, pt, ph, pw = _shape(sd, "net.tokenize.weight", 5, where)
    _, tt, th, tw, table_dim = _shape(sd, "net.pos_embed", 5, where)
    fields = _shape(sd, "net.detokenize.weight", 5, where)[1]
    mlp_dim = _shape(sd, "net.blocks.0.fc1.weight", 2, where)[0]
    layers = len({k.split(".")[2] for k in sd if k.startswith("net.blocks.")})
    if channels not in (fields, 4 * fields) or table_dim != dim:
        raise opzoo.CheckpointError(f"{where}: the tensor shapes do not form a GPhyT network ({channels} input channels "
                                    f"for {fields} fields, position table width {table_dim} for {dim})")
    return {"in_channels": fields, "out_channels": fields, "use_derivatives": channels == 4 * fields,
            "hidden_dim": dim, "mlp_dim": mlp_dim, "num_layers": layers, "patch_size": (pt, ph, pw),
            "in_timesteps": tt * pt, "img_size": (th * ph, tw * pw)}


def recorded_args(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """What the run's recorded ``config["model"]`` says about the network, in opzoo's names; refuses what opzoo does
    not implement."""
    model = config.get("model")
    if not isinstance(model, Mapping) or not isinstance(model.get("transformer"), Mapping):
        raise opzoo.CheckpointError(f"{where}: the recorded config has no model.transformer section")
    tr, tok = model["transformer"], model.get("tokenizer", {}) or {}
    if not isinstance(tok, Mapping):
        raise opzoo.CheckpointError(f"{where}: the recorded config's model.tokenizer is a {type(tok).__name__}, not a "
                                    f"section: the file's record is damaged")
    if model.get("architecture", "gphyt") != "gphyt":
        raise opzoo.CheckpointError(f"{where}: the recorded architecture is {model.get('architecture')!r}, not gphyt")
    refused = {k: v for k, v in (("pos_enc_mode", tr.get("pos_enc_mode")), ("att_mode", tr.get("att_mode", "full")),
                                 ("tokenizer_mode", tok.get("tokenizer_mode", "linear")),
                                 ("detokenizer_mode", tok.get("detokenizer_mode", "linear")),
                                 ("tokenizer_overlap", tok.get("tokenizer_overlap", 0)),
                                 ("detokenizer_overlap", tok.get("detokenizer_overlap", 0)))
               if v not in ("absolute", "full", "linear", 0)}
    if refused:
        raise opzoo.CheckpointError(f"{where}: the recorded config asks for what opzoo-gphyt does not implement: "
                                    + ", ".join(f"{k}={v!r}" for k, v in refused.items())
                                    + " (it implements absolute positions, full attention, linear tokenizers, no "
                                    "overlap: the published runs' settings)")
    if "model_size" in tr and (not isinstance(tr["model_size"], str) or tr["model_size"] not in SIZES):
        raise opzoo.CheckpointError(f"{where}: model_size {tr['model_size']!r} is not one of {', '.join(SIZES)}")
    integrator = tr.get("integrator", "Euler")

    def lie(key: str, value: Any, wanted: str) -> opzoo.CheckpointError:
        return opzoo.CheckpointError(f"{where}: the recorded config's {key} is {value!r}, not {wanted}: the file's "
                                     f"record is damaged; convert it with the sizes given (opzoo convert gphyt FILE OUT "
                                     f"--option num_heads=N) or fix the record")

    def whole(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise lie(key, value, "a whole number >= 1")
        return value

    if tr.get("input_channels") is not None:
        whole("model.transformer.input_channels", tr["input_channels"])
    patch = tr.get("patch_size", ())
    if not isinstance(patch, (list, tuple)) or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 1
                                                        for p in patch):
        raise lie("model.transformer.patch_size", patch, "a list of whole numbers >= 1")
    dropout = tr.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise lie("model.transformer.dropout", dropout, "a number in [0, 1)")
    if not isinstance(tr.get("use_derivatives", False), bool) or not isinstance(integrator, (str, type(None))):
        raise lie("model.transformer.use_derivatives/integrator", (tr.get("use_derivatives"), integrator),
                  "a boolean and a name")
    args = {**SIZES.get(tr.get("model_size"), {}), "in_channels": tr.get("input_channels"),
            "use_derivatives": tr.get("use_derivatives", False), "integrator": integrator or "none",
            "patch_size": tuple(patch), "dropout": float(dropout)}
    img = model.get("img_size")
    if img is not None:
        if not isinstance(img, (list, tuple)) or len(img) != 3:
            raise lie("model.img_size", img, "[time, height, width]")
        args["in_timesteps"], args["img_size"] = whole("model.img_size[0]", img[0]), \
            (whole("model.img_size[1]", img[1]), whole("model.img_size[2]", img[2]))
    return {k: v for k, v in args.items() if v is not None and v != ()}


def recorded_normalization(config: Mapping[str, Any] | None) -> str | None:
    """How the run that saved the file fed its data (its recorded ``data.use_normalization``): ``"stats"`` (each
    dataset's statistics), ``"instance"`` (per sample, upstream's other mode), or None when it records nothing."""
    data = config.get("data") if isinstance(config, Mapping) else None
    if not isinstance(data, Mapping) or "use_normalization" not in data:
        return None
    return "stats" if bool(data["use_normalization"]) else "instance"


def model_args(sd: Mapping[str, torch.Tensor], config: Mapping[str, Any] | None, where: str,
               num_heads: int | None = None, integrator: str | None = None) -> dict[str, Any]:
    """The ``gphyt`` config of a state dict (opzoo names) and its recorded config: sizes from the shapes, checked
    against the record; heads and integrator from the record (or the size table, or the options)."""
    args = sizes_of(sd, where)
    said = recorded_args(config, where) if config is not None else {}
    differ = {k: (v, args[k]) for k, v in said.items() if k in args and v != args[k]}
    if differ:
        raise opzoo.CheckpointError(f"{where}: the recorded config and the tensors disagree: "
                                    + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items()))
    if num_heads is None:
        num_heads = said.get("num_heads") or next((s["num_heads"] for s in SIZES.values()
                                                   if s["hidden_dim"] == args["hidden_dim"]), None)
    if num_heads is None:
        raise opzoo.CheckpointError(f"{where}: width {args['hidden_dim']} is no size of GPhyT's table and the file "
                                    "records no model_size: pass num_heads=N (opzoo convert gphyt FILE OUT --option "
                                    "num_heads=N)")
    integrator = integrator or said.get("integrator", "Euler")
    return {**args, "num_heads": num_heads, "integrator": integrator,
            **({"dropout": said["dropout"]} if "dropout" in said else {})}


def convert_gphyt(path, num_heads: int | None = None, integrator: str | None = None) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``gphyt``: a GPhyT ``.pth`` -> :class:`opzoo.ConvertedCheckpoint`."""
    if num_heads is not None and (isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1):
        raise opzoo.CheckpointError(f"num_heads: a positive integer, got {num_heads!r}")
    if integrator is not None and integrator not in ("Euler", "Heun", "RK4", "none"):
        raise opzoo.CheckpointError(f"integrator: 'Euler', 'Heun', 'RK4' or 'none', got {integrator!r}")
    path = Path(path)
    raw, config = read_checkpoint(path)
    sd = to_opzoo_names(raw, path)
    args = model_args(sd, config, str(path), num_heads, integrator)
    recorded = recorded_normalization(config)
    if recorded is not None:
        args["normalization"] = recorded
    match = opzoo.get_registry().matching_preset("gphyt", args)
    cfg = pretrained_cfg(match.name if match is not None else None)
    cfg["source"] = f"GPhyT checkpoint {path} (converted by opzoo's 'gphyt' converter)"
    return opzoo.ConvertedCheckpoint(architecture="gphyt", model_args=args, state_dict=sd, pretrained_cfg=cfg,
                                     preset=match.name if match is not None else None)


def file_args(artifacts: opzoo.PretrainedArtifacts) -> dict[str, Any]:
    """The config the file builds (the load check, :func:`opzoo.kit.file_args_agree`): the heads and the integrator as
    the file records them (or its size's row), never the preset's: a file recorded with RK4 is another function than
    the Euler preset, whatever the tensors say; and the normalization it records."""
    c = artifacts.model_config
    path = next(iter(artifacts.files.values()))
    raw, config = read_checkpoint(path, mapped=True)  # its tensors are held already: their shapes and the config
    try:
        args = model_args(to_opzoo_names(raw, path), config, str(path))
    except opzoo.CheckpointError as e:
        if "pass num_heads" not in str(e):
            raise
        args = model_args(to_opzoo_names(raw, path), config, str(path), num_heads=c.num_heads)
    recorded = recorded_normalization(config)
    if recorded is not None:
        args["normalization"] = recorded if c.normalization != "none" else "none"
    return args


# ---- upstream's own network, run side by side with opzoo's by `opzoo benchmark` and by the parity tests -------------
# GPhyT is not on the package index: ``OPZOO_GPHYT_REPO`` names a checkout at 4374116, the commit that published the
# weights (its ``gphyt/model`` suffices; it needs einops and torchvision).
REPO_ENV = "OPZOO_GPHYT_REPO"


def upstream_class(repo: str | os.PathLike | None = None):
    """``PhysicsTransformer`` from the checkout ``repo`` (default ``$OPZOO_GPHYT_REPO``), or UpstreamUnavailable."""
    return kit.import_from_checkout(REPO_ENV, "gphyt.model.transformer.model", family="GPhyT",
                                    url="https://github.com/FloWsnr/General-Physics-Transformer", at="4374116 (the "
                                    "layout before the 2026-02 restructuring)", marker="gphyt/model/transformer/model.py",
                                    repo=repo).PhysicsTransformer


def upstream_network(model, repo=None):
    """Upstream's network at ``model``'s sizes, holding ``model``'s weights, in eval mode."""
    c = model.config
    net = upstream_class(repo)(
        num_fields=c.in_channels, hidden_dim=c.hidden_dim, mlp_dim=c.mlp_dim, num_heads=c.num_heads,
        num_layers=c.num_layers, patch_size=tuple(c.patch_size), img_size=(c.in_timesteps, *c.img_size),
        use_derivatives=c.use_derivatives, pos_enc_mode="absolute", att_mode="full",
        integrator=c.integrator if c.integrator != "none" else None, dropout=c.dropout)
    state = net.state_dict()
    state.update({upstream_name(k): v for k, v in model.state_dict().items()})
    net.load_state_dict(state, strict=True)
    return net.to(next(model.parameters()).dtype).eval()


def build_upstream_gphyt(model, x) -> opzoo.Upstream:
    """Their ``PhysicsTransformer`` with the model's weights, on the model's normalized frames."""
    if model.config.step_size != 1.0:
        raise opzoo.UpstreamUnavailable("upstream's forward always steps by 1.0 (it does not pass step_size on)")
    net = upstream_network(model)
    return opzoo.Upstream(f"GPhyT PhysicsTransformer ({os.environ.get(REPO_ENV)})", net,
                          inputs=lambda t: model._frames(t)[0].detach().contiguous())

"""The ``pde-transformer`` converter: a PDE-Transformer checkpoint (a diffusers ``ModelMixin`` directory:
``config.json`` and ``diffusion_pytorch_model.safetensors``, e.g. a subfolder of ``thuerey-group/pde-transformer``)
-> opzoo ``pdet-mc`` (mixed channels) or ``pdet-sc`` (separate channels: ``num_timesteps`` in config.json)
weights."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, Mapping

import torch

import opzoo
from opzoo import kit

from .backbones import DEPTH, SIZES
from .provenance import pretrained_cfg

CONFIG_FILE, WEIGHTS_FILE = "config.json", "diffusion_pytorch_model.safetensors"
MIXED_CLASS = "PDETransformer"
# config.json keys of pdetransformer's mixed-channel PDETransformer (register_to_config) -> opzoo config fields
DIRECT = {"in_channels": "in_channels", "out_channels": "out_channels", "periodic": "periodic",
          "window_size": "window_size", "patch_size": "patch_size"}
# PDEImpl keywords a config.json may carry through **kwargs
EXTRA = ("hidden_size", "depth", "num_heads", "mlp_ratio", "num_classes", "class_dropout_prob", "max_hidden_size")
IGNORED = ("_class_name", "_diffusers_version", "_name_or_path", "sample_size", "type", "carrier_token_active")


def repo_files(path: Path) -> tuple[Path, Path]:
    """``(config.json, weights)`` of a checkpoint directory, or of a weights file with config.json beside it."""
    folder, weights = (path, path / WEIGHTS_FILE) if path.is_dir() else (path.parent, path)
    config = folder / CONFIG_FILE
    for f in (config, weights):
        if not f.is_file():
            what = "is not a regular file (a FIFO, device or directory)" if f.exists() else "is missing"
            raise opzoo.CheckpointError(f"{folder} is not a PDE-Transformer checkpoint directory: {f.name} {what} "
                                        f"(a diffusers save_pretrained directory holds {CONFIG_FILE} and "
                                        f"{WEIGHTS_FILE})")
    return config, weights


def read_config(path: Path) -> dict[str, Any]:
    doc = opzoo.read_json(path, "a diffusers config.json", error=opzoo.CheckpointError)
    if not isinstance(doc, dict):
        raise opzoo.CheckpointError(f"{path}: expected a JSON object")
    return doc


def _shape(sd: Mapping[str, Any], key: str, where: Path) -> tuple[int, ...]:
    return kit.tensor_shape(sd, key, str(where), "mixed-channel PDE-Transformer")


def sizes_of(sd: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The network's sizes, read from its tensors (``model.``-prefixed names)."""
    hidden, c_in, patch, _ = _shape(sd, "model.x_embedder.proj.weight", where)
    levels = sum(1 for k in sd if k.startswith("model.t_embedder_") and k.endswith(".mlp.0.weight")) - 1
    stages = [f"encoder_level_{i}" for i in range(levels)] + ["latent"] + [f"decoder_level_{i}" for i in range(levels)]
    depth = [len({k.split(".")[3] for k in sd if k.startswith(f"model.{st}.blocks.")}) for st in stages]
    heads = _shape(sd, "model.encoder_level_0.blocks.0.attn.logit_scale", where)[0]
    mlp_hidden = _shape(sd, "model.encoder_level_0.blocks.0.mlp.fc1.weight", where)[0]
    rows = _shape(sd, "model.y_embedder_0.embedding_table.weight", where)[0]
    out_rows = _shape(sd, "model.final_layer.out_proj.weight", where)[0]
    if levels < 1 or 0 in depth or out_rows % (patch * patch):
        raise opzoo.CheckpointError(f"{where}: the tensors do not form a mixed-channel PDE-Transformer "
                                    f"({levels} levels, stage depths {depth})")
    return {"in_channels": c_in, "out_channels": out_rows // (patch * patch), "hidden_size": hidden, "depth": depth,
            "num_heads": heads, "mlp_ratio": mlp_hidden / hidden, "patch_size": patch, "num_classes": rows - 1}


SEPARATE_KEYS = ("_class_name", "_diffusers_version", "_name_or_path", "sample_size", "type", "carrier_token_active",
                 "num_timesteps", "periodic", "patch_size")
TABLES = ("relative_coords_table", "relative_position_index")  # buffers upstream saves; opzoo recomputes them


def architecture_of(doc: Mapping[str, Any]) -> str:
    return "pdet-sc" if "num_timesteps" in doc else "pdet-mc"


def separate_model_args(doc: Mapping[str, Any], sd: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The ``pdet-sc`` config of a separate-channel checkpoint: sizes from its tensors (the window from its saved
    position tables), checked against ``config.json``'s ``type``; boundary from config.json (their default: walls)."""
    if doc.get("carrier_token_active", True):  # their constructor's default is True
        raise opzoo.CheckpointError(f"{where}: carrier tokens (carrier_token_active true or unset) are not "
                                    "implemented by opzoo-pdet (the published checkpoints were trained without them)")
    unknown = sorted(set(doc) - set(SEPARATE_KEYS))
    if unknown:
        raise opzoo.CheckpointError(f"{where}: config.json keys {', '.join(unknown)} are not known to opzoo's "
                                    "PDE-Transformer: refusing rather than ignoring them")
    hidden, steps, patch, _ = _shape(sd, "model.x_embedder.proj.weight", where)
    levels = sum(1 for k in sd if k.startswith("model.t_embedder_") and k.endswith(".mlp.0.weight")) - 1
    stages = [f"encoder_level_{i}" for i in range(levels)] + ["latent"] + [f"decoder_level_{i}" for i in range(levels)]
    depth = [len({k.split(".")[3] for k in sd if k.startswith(f"model.{st}.blocks.")}) for st in stages]
    block = "model.encoder_level_0.blocks.0."
    table = _shape(sd, block + "attn_spatial.pos_emb_funct.relative_coords_table", where)
    args = {"num_timesteps": steps, "hidden_size": hidden, "depth": depth, "patch_size": patch,
            "num_heads": _shape(sd, block + "attn_spatial.logit_scale", where)[0],
            "mlp_ratio": _shape(sd, block + "mlp.fc1.weight", where)[0] / hidden, "window_size": (table[1] + 1) // 2,
            "num_classes": _shape(sd, "model.task_embedder_0.embedding_table.weight", where)[0],
            "periodic": bool(doc.get("periodic", False))}
    if doc.get("num_timesteps") != steps or doc.get("patch_size", patch) != patch:
        raise opzoo.CheckpointError(f"{where}: config.json (num_timesteps {doc.get('num_timesteps')}, patch_size "
                                    f"{doc.get('patch_size')}) and the weights ({steps} frames, patch {patch}) disagree")
    if doc.get("type") in SIZES:
        want = {**SIZES[doc["type"]], "depth": list(DEPTH), "window_size": 8, "num_classes": 1000, "mlp_ratio": 4.0}
        differ = {k: (v, args[k]) for k, v in want.items() if args[k] != v}
        if differ:
            raise opzoo.CheckpointError(f"{where}: config.json (type {doc['type']!r}) and the weights disagree: "
                                        + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items()))
    return args


def model_args(doc: Mapping[str, Any], sd: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The ``pdet-mc`` config of a mixed-channel checkpoint (``pdet-sc``: :func:`separate_model_args`): sizes from
    its tensors, checked against its ``config.json`` (``type`` PDE-S/B/L fixes hidden size, heads and depth); window
    and boundary from config.json (pdetransformer's defaults: 8, periodic)."""
    if "num_timesteps" in doc:
        return separate_model_args(doc, sd, where)
    if doc.get("carrier_token_active"):
        raise opzoo.CheckpointError(f"{where}: carrier_token_active=true: carrier tokens are not implemented by "
                                    "opzoo-pdet (the published checkpoints were trained without them)")
    unknown = sorted(set(doc) - set(DIRECT) - set(EXTRA) - set(IGNORED))
    if unknown:
        raise opzoo.CheckpointError(f"{where}: config.json keys {', '.join(unknown)} are not known to opzoo's "
                                    "PDE-Transformer: refusing rather than ignoring them")
    args = sizes_of(sd, where)
    said = {k: doc[k] for k in (*DIRECT, *EXTRA) if k in doc}
    if doc.get("type") in SIZES:
        said |= {**SIZES[doc["type"]], "depth": list(DEPTH)}
    said.pop("periodic", None), said.pop("window_size", None), said.pop("class_dropout_prob", None)
    said.pop("max_hidden_size", None)
    differ = {k: (v, args[k]) for k, v in said.items() if k in args and v != args[k]}
    if differ:
        raise opzoo.CheckpointError(f"{where}: config.json (type {doc.get('type')!r}) and the weights disagree: "
                                    + ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in differ.items()))
    args["window_size"] = doc.get("window_size", 8)
    args["periodic"] = doc.get("periodic", True)
    for key in ("class_dropout_prob", "max_hidden_size"):
        if key in doc:
            args[key] = doc[key]
    return args


def convert_pde_transformer(path) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``pde-transformer``: a checkpoint directory (or its weights file) ->
    :class:`opzoo.ConvertedCheckpoint`. Tensor names lose pdetransformer's ``model.`` prefix for opzoo's ``net.``."""
    path = Path(path)
    config, weights = repo_files(path)
    doc = read_config(config)
    sd = kit.read_safetensors(weights)
    args = model_args(doc, sd, config)
    foreign = sorted(k for k in sd if not k.startswith("model."))
    if foreign:
        raise opzoo.CheckpointError(f"{weights}: tensors outside PDETransformer.model: {', '.join(foreign[:5])}")
    architecture = architecture_of(doc)
    if architecture == "pdet-sc":
        sd = drop_position_tables(sd, args, weights)
    match = opzoo.get_registry().matching_preset(architecture, args)
    preset = match.name if match is not None else None
    cfg = pretrained_cfg(architecture, published=preset is not None)
    cfg["source"] = f"PDE-Transformer checkpoint {path} (converted by opzoo's 'pde-transformer' converter)"
    return opzoo.ConvertedCheckpoint(architecture=architecture, model_args=args,
                                     state_dict={"net." + k[len("model."):]: v for k, v in sd.items()},
                                     pretrained_cfg=cfg, preset=preset)


def drop_position_tables(sd: Mapping[str, Any], args: Mapping[str, Any], where: Path) -> dict[str, Any]:
    """The separate-channel checkpoint without the window position tables upstream saves as buffers, after checking
    that each equals the one opzoo computes (a checkpoint of another window or log scaling is refused)."""
    from .mixed_net import RelativePositionBias

    ours = RelativePositionBias(args["window_size"], args["num_heads"])
    for key in (k for k in sd if k.endswith(TABLES)):
        mine = ours.table.unsqueeze(0) if key.endswith("table") else ours.index
        if tuple(sd[key].shape) != tuple(mine.shape) or (sd[key].double() - mine.double()).abs().max() > 1e-6:
            raise opzoo.CheckpointError(f"{where}: {key} is not the position table of {args['window_size']}x"
                                        f"{args['window_size']} windows that opzoo computes")
    return {k: v for k, v in sd.items() if not k.endswith(TABLES)}


# ---- the load check: the subfolder's config.json (and the tensors) build the network the preset builds ----------------
NETWORK = {"pdet-mc": "mixed-channel", "pdet-sc": "separate-channel"}


def config_agrees(subfolder: str, architecture: str = "pdet-mc"):
    """The load check: the subfolder's config.json builds the preset's network (of ``architecture``)."""

    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        path = artifacts.files.get(f"{subfolder}/{CONFIG_FILE}")
        if path is None:
            raise opzoo.CheckFailed(f"{subfolder}/{CONFIG_FILE} was not fetched")
        doc = read_config(path)
        theirs = architecture_of(doc)
        if theirs != architecture:
            rows = opzoo.get_registry().family(theirs).variants
            names = [v.name for v in rows if v.data.get("size") == doc.get("type")] or [v.name for v in rows]
            raise opzoo.CheckFailed(f"{path} is a {NETWORK[theirs]} PDE-Transformer checkpoint, not the "
                                    f"{NETWORK[architecture]} network this preset builds: load it with "
                                    f"{' or '.join(names)}")
        sd = {"model." + k[4:]: v for k, v in artifacts.state_dict.items()}
        weights = artifacts.files.get(f"{subfolder}/{WEIGHTS_FILE}")
        if weights is not None:  # the position tables the converter dropped (they say the window size)
            from safetensors import safe_open

            with safe_open(str(weights), "pt") as f:
                sd |= {k: f.get_tensor(k) for k in f.keys() if k.endswith(TABLES)}
        try:
            args = model_args(doc, sd, path)
        except opzoo.CheckpointError as e:
            raise opzoo.CheckFailed(str(e)) from None
        c = artifacts.model_config
        mismatched = {k: (v, getattr(c, k)) for k, v in args.items() if getattr(c, k) != v}
        if mismatched:
            detail = ", ".join(f"{k}: config.json {a!r}, model {b!r}" for k, (a, b) in mismatched.items())
            raise opzoo.CheckFailed(f"{path} describes another network ({detail}); load it with "
                                    f"opzoo.load(..., {', '.join(f'{k}={a!r}' for k, (a, _) in mismatched.items())}) "
                                    "if that is what you want")
        return f"{subfolder}/{CONFIG_FILE} and the tensors build this network ({', '.join(f'{k}={v}' for k, v in args.items())})"

    return opzoo.PretrainedCheck(f"{subfolder}/config.json agrees with the preset", run)


# ---- pdetransformer's own networks, timed side by side with opzoo's by `opzoo benchmark` ----------
# pdetransformer's own mixed-channel network, timed side by side with opzoo's by ``opzoo benchmark``.
# 
# pdetransformer's package ``__init__`` imports its training stack (lightning, wandb, the data modules); where those
# are not installed, the model module is imported under empty parent packages (it needs diffusers, einops and timm
# only). ``PYTHONPATH=.venv/reference/pdetransformer-0.1.11 opzoo benchmark "pdet-*"`` uses the copy ``make install``
# puts there.




def mixed_channels_module(kind: str = "mixed_channels"):
    """``pdetransformer.core.<kind>.pde_transformer``, or UpstreamUnavailable saying what is missing."""
    try:
        return importlib.import_module(f"pdetransformer.core.{kind}.pde_transformer")
    except ImportError as first:
        spec = importlib.util.find_spec("pdetransformer") if "pdetransformer" not in sys.modules else None
        if spec is None or not spec.submodule_search_locations:
            raise opzoo.UpstreamUnavailable(f"pdetransformer is not importable ({first}); pip install "
                                            "pdetransformer==0.1.11") from None
        root = Path(list(spec.submodule_search_locations)[0])
        for name, path in (("pdetransformer", root), ("pdetransformer.core", root / "core"),
                           ("pdetransformer.core.mixed_channels", root / "core" / "mixed_channels"),
                           ("pdetransformer.core.separate_channels", root / "core" / "separate_channels")):
            if name not in sys.modules:
                module = types.ModuleType(name)
                module.__path__ = [str(path)]
                sys.modules[name] = module
        try:
            return importlib.import_module(f"pdetransformer.core.{kind}.pde_transformer")
        except ImportError as e:
            raise opzoo.UpstreamUnavailable(f"pdetransformer's network needs {e.name or e} (diffusers, einops, timm, "
                                            "transformers)") from None


def build_pdetransformer(model, x) -> opzoo.Upstream:
    """Their ``PDETransformer`` at the model's sizes (a size other than PDE-S/B/L registered like theirs), on the
    channels-first, standardized frame."""
    mc = mixed_channels_module()
    c = model.config
    size = next((k for k, v in SIZES.items() if (v["hidden_size"], v["num_heads"]) == (c.hidden_size, c.num_heads)
                 and c.depth == [2, 5, 8, 5, 2] and c.mlp_ratio == 4 and c.num_classes == 1000), None)
    if size is None:
        size = "opzoo-benchmark"
        mc.PDE_models[size] = lambda **kw: mc.PDEImpl(
            down_factor=2, hidden_size=c.hidden_size, num_heads=c.num_heads, depth=list(c.depth), mlp_ratio=c.mlp_ratio,
            num_classes=c.num_classes, class_dropout_prob=c.class_dropout_prob, max_hidden_size=c.max_hidden_size, **kw)
    module = mc.PDETransformer(sample_size=x.shape[1], in_channels=c.in_channels, out_channels=c.out_channels,
                               type=size, periodic=c.periodic, window_size=c.window_size, patch_size=c.patch_size)
    version = getattr(sys.modules.get("pdetransformer"), "__version__", None) or _version()
    return opzoo.Upstream(f"pdetransformer {version} PDETransformer (mixed channels)", module,
                          inputs=lambda t: model._net_input(t).detach(), outputs=lambda y: y.sample)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("pdetransformer")
    except metadata.PackageNotFoundError:
        return "?"


class SeparateChannelsCall(torch.nn.Module):
    """Their separate-channel ``PDETransformer`` called as pdetransformer's supervised prediction calls it (lists per
    channel; time 0, task 0), on ``[B, C, 2, H, W]`` slots."""

    def __init__(self, net, labels):
        super().__init__()
        self.net = net
        self.labels = labels  # (channel_types [B, C], pde_type [B, C])

    def forward(self, x):
        b, c = x.shape[:2]
        types, pde = (t.expand(b, c) for t in self.labels)
        zeros = torch.zeros(b, c, device=x.device)
        per = lambda t: list(t.unbind(1))  # noqa: E731
        return self.net(x=per(x), simulation_time=per(zeros), channel_type=per(types), pde_type=per(pde),
                        pde_parameters=per(torch.zeros(b, c, 1, device=x.device)),
                        pde_parameters_class=per(torch.zeros(b, c, 1, dtype=torch.long, device=x.device)),
                        simulation_dt=per(zeros), task=per(zeros.long()), t=per(zeros))


def build_pdetransformer_separate(model, x) -> opzoo.Upstream:
    """Their separate-channel ``PDETransformer`` at the model's sizes, on the model's two frame slots per channel."""
    sc = mixed_channels_module("separate_channels")
    c = model.config
    size = next((k for k, v in SIZES.items() if (v["hidden_size"], v["num_heads"]) == (c.hidden_size, c.num_heads)
                 and c.depth == [2, 5, 8, 5, 2] and c.mlp_ratio == 4 and c.num_classes == 1000
                 and c.window_size == 8), None)
    if size is None:
        size = "opzoo-benchmark"
        sc.PDE_models[size] = lambda **kw: sc.PDEImpl(
            down_factor=2, hidden_size=c.hidden_size, num_heads=c.num_heads, depth=list(c.depth), mlp_ratio=c.mlp_ratio,
            num_classes=c.num_classes, class_dropout_prob=c.class_dropout_prob, window_size=c.window_size, **kw)
    net = sc.PDETransformer(sample_size=x.shape[1], num_timesteps=c.num_timesteps, type=size, periodic=c.periodic,
                            carrier_token_active=False, patch_size=c.patch_size)
    none = c.num_classes
    types = torch.tensor(c.channel_types if c.channel_types is not None else [none] * c.in_channels)[None]
    pde = torch.full((1, c.in_channels), none if c.pde_type is None else c.pde_type, dtype=torch.long)
    version = getattr(sys.modules.get("pdetransformer"), "__version__", None) or _version()
    return opzoo.Upstream(f"pdetransformer {version} PDETransformer (separate channels)",
                          SeparateChannelsCall(net, (types, pde)), inputs=lambda t: model._slots(t).detach(),
                          outputs=lambda y: torch.stack(y.sample, dim=1))

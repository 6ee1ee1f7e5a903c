"""The ``morph`` converter: a MORPH checkpoint ``.pth`` -> opzoo ``morph`` weights.

A MORPH file is ``torch.save({"epoch", "model_state_dict", "optimizer_state_dict", "scheduler_state_dict"})``
(lanl/MORPH ``scripts/pretrain_MORPH.py`` and ``src/utils/trainers.py`` @ a16d5c4), its tensor names with the
``module.`` prefix of ``nn.DataParallel``/DDP where it was trained so. It is read with ``torch.load(weights_only=True)``
and nothing else is allowed: a file that needs any other class is refused before any of its code runs. Only
``model_state_dict`` is read. The network's sizes come from the tensor shapes; what the shapes cannot tell (the
attention heads, the cross-attention heads, whether the position table is sliced or interpolated in time) comes from
upstream's size table and defaults, or from the converter's options.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

import torch

import opzoo
from opzoo import kit

REPO = "lanl/MORPH"
HEAD = "a16d5c4"  # 2026-01-28, the newest commit ("updated license from BSD3 to MIT")


def at(path: str, commit: str = HEAD) -> str:
    return f"{REPO} {path} @ {commit}"


# what any MORPH file's training is known to be (a published one's row adds its own: family.pretrained_cfg)
ANY_FILE_CFG = {"in_timesteps": 1, "finetune_lr": 1e-4,
                "finetune_lr_source": "upstream's fine-tuning lr (" + at("scripts/finetune_MORPH_general.py")
                + " --lr and --lr_level4 default 1e-4, L70 and L105; 1e-3 is the pretraining lr)"}

# config/argument_parser.py @ a16d5c4 MORPH_MODELS: filters, dim, heads, depth, mlp (the heads are not in the tensors)
SIZES = {
    "Ti": {"conv_filters": 8, "dim": 256, "heads": 4, "depth": 4, "mlp_dim": 1024},
    "S": {"conv_filters": 8, "dim": 512, "heads": 8, "depth": 4, "mlp_dim": 2048},
    "M": {"conv_filters": 8, "dim": 768, "heads": 12, "depth": 8, "mlp_dim": 3072},
    "L": {"conv_filters": 8, "dim": 1024, "heads": 16, "depth": 16, "mlp_dim": 4096},
}
HEADS_BY_DIM = {256: 4, 512: 8, 768: 12, 1024: 16, 1536: 24}  # the table's Lt and XL rows too
HEADS_XA = 32  # config/argument_parser.py @ a16d5c4: --heads_xa default 32 (every script's)

AXES = {"t": "time", "d": "depth", "h": "height", "w": "width"}
RENAMES = kit.Renames([  # upstream name -> opzoo name (None: left out)
    (r"patch_embedding\.conv_features\.input_proj\.weight", "net.embed.convs.components_in.weight"),
    (r"patch_embedding\.conv_features\.conv_stack\.(\d+)\.weight",  # every second module is a LeakyReLU
     lambda m: f"net.embed.convs.convs.{int(m[1]) // 2}.weight" if int(m[1]) % 2 == 0 else None),
    (r"patch_embedding\.projection\.(weight|bias)", r"net.embed.project.\1"),
    (r"patch_embedding\.field_attn\.q", "net.embed.field_query"),
    (r"patch_embedding\.field_attn\.attn\.(in_proj_weight|in_proj_bias|out_proj\.weight|out_proj\.bias)",
     r"net.embed.field_attn.\1"),
    (r"pos_encoding\.pos_embedding", "net.positions.table"),
    (r"transformer_blocks\.(\d+)\.(norm1|norm2)\.(weight|bias)", r"net.blocks.\1.\2.\3"),
    (r"transformer_blocks\.(\d+)\.axial_attn\.attn_([tdhw])\.([qkvo])\.base\.(weight|bias)",
     lambda m: f"net.blocks.{m[1]}.attn.{AXES[m[2]]}.{m[3]}.{m[4]}"),
    (r"transformer_blocks\.(\d+)\.mlp\.0\.base\.(weight|bias)", r"net.blocks.\1.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.mlp\.3\.base\.(weight|bias)", r"net.blocks.\1.fc2.\2"),
    (r"decoder\.norm\.(weight|bias)", r"net.head_norm.\1"),
    (r"decoder\.linear\.(weight|bias)", r"net.head.\1"),
])
UPSTREAM_NAMES = kit.Renames([  # the inverse (for running upstream's network on opzoo's weights)
    (r"net\.embed\.convs\.components_in\.weight", "patch_embedding.conv_features.input_proj.weight"),
    (r"net\.embed\.convs\.convs\.(\d+)\.weight", lambda m: f"patch_embedding.conv_features.conv_stack."
                                                         f"{2 * int(m[1])}.weight"),
    (r"net\.embed\.project\.(.+)", r"patch_embedding.projection.\1"),
    (r"net\.embed\.field_query", "patch_embedding.field_attn.q"),
    (r"net\.embed\.field_attn\.(.+)", r"patch_embedding.field_attn.attn.\1"),
    (r"net\.positions\.table", "pos_encoding.pos_embedding"),
    (r"net\.blocks\.(\d+)\.(norm1|norm2)\.(.+)", r"transformer_blocks.\1.\2.\3"),
    (r"net\.blocks\.(\d+)\.attn\.(\w+)\.([qkvo])\.(.+)", lambda m: f"transformer_blocks.{m[1]}.axial_attn."
     f"attn_{m[2][0]}.{m[3]}.base.{m[4]}"),
    (r"net\.blocks\.(\d+)\.fc1\.(.+)", r"transformer_blocks.\1.mlp.0.base.\2"),
    (r"net\.blocks\.(\d+)\.fc2\.(.+)", r"transformer_blocks.\1.mlp.3.base.\2"),
    (r"net\.head_norm\.(.+)", r"decoder.norm.\1"),
    (r"net\.head\.(.+)", r"decoder.linear.\1"),
])


opzoo_name = RENAMES.get  # an upstream tensor's opzoo name (None: not one opzoo knows)
upstream_name = UPSTREAM_NAMES.name  # the inverse, for running upstream's network on opzoo's weights (KeyError)


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """``model_state_dict`` of a MORPH file, without the ``module.`` prefix; nothing is executed."""
    payload = opzoo.safe_torch_load(path)
    sd = kit.tensors_under(payload, "model_state_dict", str(path), "MORPH", "upstream's scripts")
    return kit.strip_prefix(sd, "module.", str(path))


def to_opzoo_names(sd: Mapping[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    lora = sorted(k for k in sd if re.search(r"\.(A|B)$", k))
    if lora:
        raise opzoo.CheckpointError(f"{path}: LoRA tensors ({', '.join(lora[:3])}): a fine-tuned checkpoint with "
                                    "LoRA adapters; opzoo-morph reads the foundation checkpoints (merge the adapters "
                                    "into the base weights first)")
    return RENAMES.apply(sd, str(path), "MORPH's ViT3DRegression")


def _shape(sd: Mapping[str, torch.Tensor], key: str, ndim: int, where: str) -> tuple[int, ...]:
    return kit.tensor_shape(sd, key, where, "MORPH", ndim)


def sizes_of(sd: Mapping[str, torch.Tensor], where: str) -> dict[str, Any]:
    """The network's sizes read from its tensors (opzoo names)."""
    hidden, max_components = _shape(sd, "net.embed.convs.components_in.weight", 5, where)[:2]
    convs = sorted(int(k.split(".")[4]) for k in sd if k.startswith("net.embed.convs.convs."))
    if not convs or convs != list(range(len(convs))) or hidden != 8:
        raise opzoo.CheckpointError(f"{where}: the component convolutions are not MORPH's (hidden {hidden}, "
                                    f"{len(convs)} layers)")
    filters = _shape(sd, f"net.embed.convs.convs.{convs[-1]}.weight", 5, where)[0]
    dim, features = _shape(sd, "net.embed.project.weight", 2, where)
    _, max_ar, max_patches, table_dim = _shape(sd, "net.positions.table", 4, where)
    mlp_dim = _shape(sd, "net.blocks.0.fc1.weight", 2, where)[0]
    depth = len({k.split(".")[2] for k in sd if k.startswith("net.blocks.")})
    head_rows = _shape(sd, "net.head.weight", 2, where)[0]
    if 0 in (filters, dim, features, mlp_dim, head_rows, max_components, max_ar, max_patches):
        raise opzoo.CheckpointError(f"{where}: a tensor with a dimension of size 0 (filters {filters}, width {dim}, "
                                    f"features {features}, MLP {mlp_dim}): not a MORPH network")
    patch = round((features / filters) ** (1 / 3))
    if patch**3 * filters != features or table_dim != dim or head_rows % (max_components * patch**3):
        raise opzoo.CheckpointError(f"{where}: the tensor shapes do not form a MORPH network (projection "
                                    f"{features} features from {filters} filters, table width {table_dim}, decoder "
                                    f"{head_rows} rows)")
    return {"conv_filters": filters, "dim": dim, "depth": depth, "mlp_dim": mlp_dim, "patch_size": patch,
            "max_components": max_components, "max_fields": head_rows // (max_components * patch**3),
            "max_ar": max_ar, "max_patches": max_patches}


def model_args(sd: Mapping[str, torch.Tensor], where: str, heads: int | None = None, heads_xa: int = HEADS_XA,
               time_positions: str | None = None) -> dict[str, Any]:
    """The ``morph`` config of a state dict (opzoo names): sizes from the shapes; heads from upstream's size table
    (by width) unless given; the time positions as upstream's pretraining builds them (``interpolate`` for the L
    size with more than one frame, its ``model_size == 'L' and max_ar > 1``) unless given."""
    args = sizes_of(sd, where)
    if heads is None:
        if args["dim"] not in HEADS_BY_DIM:
            raise opzoo.CheckpointError(f"{where}: width {args['dim']} is not a size of MORPH's table, so the number "
                                        "of attention heads is not known: pass heads=N (opzoo convert morph FILE OUT "
                                        "--option heads=N)")
        heads = HEADS_BY_DIM[args["dim"]]
    if time_positions is None:
        large = all(args[k] == v for k, v in SIZES["L"].items() if k != "heads")
        time_positions = "interpolate" if large and args["max_ar"] > 1 else "slice"
    if time_positions not in ("slice", "interpolate"):
        raise opzoo.CheckpointError(f"time_positions: 'slice' or 'interpolate', got {time_positions!r}")
    return {**args, "heads": heads, "heads_xa": heads_xa, "time_positions": time_positions}


def convert_morph(path, heads: int | None = None, heads_xa: int = HEADS_XA,
                  time_positions: str | None = None) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``morph``: a MORPH ``.pth`` -> :class:`opzoo.ConvertedCheckpoint`."""
    for key, value in (("heads", heads), ("heads_xa", heads_xa)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise opzoo.CheckpointError(f"{key}: a positive integer, got {value!r}")
    path = Path(path)
    sd = to_opzoo_names(read_checkpoint(path), path)
    args = model_args(sd, str(path), heads, heads_xa, time_positions)
    registry = opzoo.get_registry()
    match = registry.matching_preset("morph", args)
    cfg = dict(match.pretrained_cfg) if match is not None else dict(ANY_FILE_CFG)  # a published file's row's
    cfg["source"] = f"MORPH checkpoint {path} (converted by opzoo's 'morph' converter)"
    return opzoo.ConvertedCheckpoint(architecture="morph", model_args=args, state_dict=sd, pretrained_cfg=cfg,
                                     preset=match.name if match is not None else None)


def file_args(artifacts: opzoo.PretrainedArtifacts) -> dict[str, Any]:
    """The config the file's tensors build (the load check, :func:`opzoo.kit.file_args_agree`). The heads are not in
    the tensors: the file's are its width's in upstream's size table (never the preset's: S's weights in Ti's 4 heads
    are another function), or the preset's for a width not in it."""
    c, where = artifacts.model_config, artifacts.preset
    try:
        return model_args(artifacts.state_dict, where, heads_xa=c.heads_xa, time_positions=c.time_positions)
    except opzoo.CheckpointError:
        return model_args(artifacts.state_dict, where, heads=c.heads, heads_xa=c.heads_xa,
                          time_positions=c.time_positions)


# ---- upstream's own network, run side by side with opzoo's by `opzoo benchmark` and by the parity tests -------------
# MORPH is not on the package index (its README's ``morph-pde`` is not published): ``OPZOO_MORPH_REPO`` names a
# checkout of github.com/lanl/MORPH (its ``src/utils`` and ``config`` suffice; a16d5c4 is the tested commit). Its
# modules import each other as ``src.utils.*``, so the checkout's root goes on ``sys.path`` while it is imported.
REPO_ENV = "OPZOO_MORPH_REPO"


def upstream_class(repo: str | os.PathLike | None = None):
    """lanl/MORPH's ``ViT3DRegression`` from the checkout ``repo`` (default ``$OPZOO_MORPH_REPO``), or
    UpstreamUnavailable saying what to set."""
    return kit.import_from_checkout(REPO_ENV, "src.utils.vit_conv_xatt_axialatt2", family="MORPH",
                                    url="https://github.com/lanl/MORPH", marker="src/utils/vit_conv_xatt_axialatt2.py",
                                    repo=repo).ViT3DRegression


def upstream_network(model, repo=None) -> torch.nn.Module:
    """Upstream's network at ``model``'s sizes, holding ``model``'s weights, in eval mode."""
    c = model.config
    cls = upstream_class(repo)
    net = cls(patch_size=c.patch_size, dim=c.dim, depth=c.depth, heads=c.heads, heads_xa=c.heads_xa,
              mlp_dim=c.mlp_dim, max_components=c.max_components, conv_filter=c.conv_filters, max_ar=c.max_ar,
              max_patches=c.max_patches, max_fields=c.max_fields, dropout=c.dropout, emb_dropout=c.emb_dropout,
              model_size="L" if c.time_positions == "interpolate" else "Ti")
    if c.time_positions == "interpolate" and c.max_ar == 1:
        raise opzoo.UpstreamUnavailable("upstream interpolates its position table only for max_ar > 1")
    state = {upstream_name(k): v for k, v in model.state_dict().items()}
    net.load_state_dict(state, strict=True)
    return net.to(next(model.parameters()).dtype).eval()


def build_upstream_morph(model, x) -> opzoo.Upstream:
    """Their ``ViT3DRegression`` with the model's weights, on the model's normalized fields."""
    net = upstream_network(model)

    def inputs(t):
        v, _, _ = model._normalized(t)
        return v.detach().contiguous()

    return opzoo.Upstream(f"lanl/MORPH ViT3DRegression ({os.environ.get(REPO_ENV)})", net, inputs=inputs,
                          outputs=lambda y: y[2])

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

import re
from pathlib import Path
from typing import Any, Mapping

import torch

import opzoo

from .provenance import pretrained_cfg

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
NAMES = [  # upstream name pattern -> opzoo name template
    (r"patch_embedding\.conv_features\.input_proj\.weight", "net.embed.convs.components_in.weight"),
    (r"patch_embedding\.conv_features\.conv_stack\.(\d+)\.weight", None),  # every second module is a LeakyReLU
    (r"patch_embedding\.projection\.(weight|bias)", r"net.embed.project.\1"),
    (r"patch_embedding\.field_attn\.q", "net.embed.field_query"),
    (r"patch_embedding\.field_attn\.attn\.(in_proj_weight|in_proj_bias|out_proj\.weight|out_proj\.bias)",
     r"net.embed.field_attn.\1"),
    (r"pos_encoding\.pos_embedding", "net.positions.table"),
    (r"transformer_blocks\.(\d+)\.(norm1|norm2)\.(weight|bias)", r"net.blocks.\1.\2.\3"),
    (r"transformer_blocks\.(\d+)\.axial_attn\.attn_([tdhw])\.([qkvo])\.base\.(weight|bias)", None),
    (r"transformer_blocks\.(\d+)\.mlp\.0\.base\.(weight|bias)", r"net.blocks.\1.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.mlp\.3\.base\.(weight|bias)", r"net.blocks.\1.fc2.\2"),
    (r"decoder\.norm\.(weight|bias)", r"net.head_norm.\1"),
    (r"decoder\.linear\.(weight|bias)", r"net.head.\1"),
]


def opzoo_name(name: str) -> str | None:
    """The opzoo ``morph`` name of an upstream ``ViT3DRegression`` tensor (None: not one opzoo knows)."""
    for pattern, template in NAMES:
        m = re.fullmatch(pattern, name)
        if m is None:
            continue
        if template is not None:
            return m.expand(template)
        if "conv_stack" in pattern:
            index = int(m.group(1))
            return f"net.embed.convs.convs.{index // 2}.weight" if index % 2 == 0 else None
        block, axis, proj, kind = m.groups()
        return f"net.blocks.{block}.attn.{AXES[axis]}.{proj}.{kind}"
    return None


def upstream_name(name: str) -> str:
    """The inverse of :func:`opzoo_name` (for running upstream's network on opzoo's weights)."""
    rules = [
        (r"net\.embed\.convs\.components_in\.weight", "patch_embedding.conv_features.input_proj.weight"),
        (r"net\.embed\.convs\.convs\.(\d+)\.weight", lambda m: f"patch_embedding.conv_features.conv_stack."
                                                               f"{2 * int(m.group(1))}.weight"),
        (r"net\.embed\.project\.(.+)", r"patch_embedding.projection.\1"),
        (r"net\.embed\.field_query", "patch_embedding.field_attn.q"),
        (r"net\.embed\.field_attn\.(.+)", r"patch_embedding.field_attn.attn.\1"),
        (r"net\.positions\.table", "pos_encoding.pos_embedding"),
        (r"net\.blocks\.(\d+)\.(norm1|norm2)\.(.+)", r"transformer_blocks.\1.\2.\3"),
        (r"net\.blocks\.(\d+)\.attn\.(\w+)\.([qkvo])\.(.+)", lambda m: f"transformer_blocks.{m.group(1)}.axial_attn."
         f"attn_{m.group(2)[0]}.{m.group(3)}.base.{m.group(4)}"),
        (r"net\.blocks\.(\d+)\.fc1\.(.+)", r"transformer_blocks.\1.mlp.0.base.\2"),
        (r"net\.blocks\.(\d+)\.fc2\.(.+)", r"transformer_blocks.\1.mlp.3.base.\2"),
        (r"net\.head_norm\.(.+)", r"decoder.norm.\1"),
        (r"net\.head\.(.+)", r"decoder.linear.\1"),
    ]
    for pattern, template in rules:
        m = re.fullmatch(pattern, name)
        if m:
            return template(m) if callable(template) else m.expand(template)
    raise KeyError(name)


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """``model_state_dict`` of a MORPH file, without the ``module.`` prefix; nothing is executed."""
    payload = opzoo.safe_torch_load(path)
    if not isinstance(payload, Mapping) or "model_state_dict" not in payload:
        got = (f"a dict with keys {', '.join(map(str, list(payload)[:6]))}" if isinstance(payload, Mapping)
               else type(payload).__name__)
        raise opzoo.CheckpointError(f"{path}: not a MORPH checkpoint: expected a dict with 'model_state_dict' (as "
                                    f"upstream's scripts save), got {got}")
    sd = payload["model_state_dict"]
    if not isinstance(sd, Mapping) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise opzoo.CheckpointError(f"{path}: 'model_state_dict' is not a non-empty dict of tensors")
    prefixed = [str(k).startswith("module.") for k in sd]
    if any(prefixed) and not all(prefixed):
        raise opzoo.CheckpointError(f"{path}: some tensor names have the 'module.' prefix and some do not")
    return {(k[len("module."):] if all(prefixed) else k): v for k, v in sd.items()}


def to_opzoo_names(sd: Mapping[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    lora = sorted(k for k in sd if re.search(r"\.(A|B)$", k))
    if lora:
        raise opzoo.CheckpointError(f"{path}: LoRA tensors ({', '.join(lora[:3])}): a fine-tuned checkpoint with "
                                    "LoRA adapters; opzoo-morph reads the foundation checkpoints (merge the adapters "
                                    "into the base weights first)")
    out, unknown = {}, []
    for k, v in sd.items():
        name = opzoo_name(k)
        (unknown.append(k) if name is None else out.__setitem__(name, v))
    if unknown:
        raise opzoo.CheckpointError(f"{path}: tensors that are not MORPH's ViT3DRegression: {', '.join(unknown[:5])}")
    return out


def _shape(sd: Mapping[str, torch.Tensor], key: str, ndim: int, where: str) -> tuple[int, ...]:
    if key not in sd:
        raise opzoo.CheckpointError(f"{where}: tensor {key!r} is missing: not a MORPH network")
    if sd[key].ndim != ndim:
        raise opzoo.CheckpointError(f"{where}: {key!r} has shape {list(sd[key].shape)}, expected {ndim} dims")
    return tuple(sd[key].shape)


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
    match = opzoo.get_registry().matching_preset("morph", args)
    cfg = pretrained_cfg(match.name if match is not None else None)
    cfg["source"] = f"MORPH checkpoint {path} (converted by opzoo's 'morph' converter)"
    return opzoo.ConvertedCheckpoint(architecture="morph", model_args=args, state_dict=sd, pretrained_cfg=cfg,
                                     preset=match.name if match is not None else None)

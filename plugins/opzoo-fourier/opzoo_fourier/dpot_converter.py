"""The ``dpot`` checkpoint converter: official DPOT ``.pth`` files -> opzoo ``pot`` weights.

An official file is ``torch.save({'args': argparse.Namespace, 'model': state_dict, 'optimizer': ...})``
(Hub repo ``hzk17/DPOT``, files ``model_{Ti,S,M,L,H}.pth``). It is read with
``torch.load(weights_only=True)`` with only ``argparse.Namespace`` allow-listed; the config is
inferred from the tensor shapes (and ``args.modes`` / ``act`` / ``normalize`` where present).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Mapping

import torch

import opzoo
from opzoo import kit

# official name -> opzoo name, per block and for the rest (docs/models.md §1)
GLOBAL_NAMES = {
    "pos_embed": "pos_embed",
    "patch_embed.proj.0.weight": "patch_embed.proj.0.weight",
    "patch_embed.proj.0.bias": "patch_embed.proj.0.bias",
    "patch_embed.proj.2.weight": "patch_embed.proj.2.weight",
    "patch_embed.proj.2.bias": "patch_embed.proj.2.bias",
    **{f"cls_head.{i}.{p}": f"cls_head.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")},
    **{f"out_layer.{i}.{p}": f"out_head.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias")},
}
TIME_AGG_NAMES = {"time_agg_layer.w": "time_agg.w", "time_agg_layer.gamma": "time_agg.gamma"}
BLOCK_NAMES = {
    "norm1.weight": "norm1.weight", "norm1.bias": "norm1.bias",
    "norm2.weight": "norm2.weight", "norm2.bias": "norm2.bias",
    "filter.w1": "mixer.w1", "filter.b1": "mixer.b1", "filter.w2": "mixer.w2", "filter.b2": "mixer.b2",
    "mlp.0.weight": "mlp.fc1.weight", "mlp.0.bias": "mlp.fc1.bias",
    "mlp.2.weight": "mlp.fc2.weight", "mlp.2.bias": "mlp.fc2.bias",
}
RENAMES = kit.Renames.tables({**GLOBAL_NAMES, **TIME_AGG_NAMES}, ("blocks", "blocks", BLOCK_NAMES))
OFFICIAL_NAMES = RENAMES.inverse()  # opzoo's names -> the official ones
BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.(.+)$")
OFFICIAL_FILES = {"dpot-ti": "model_Ti.pth", "dpot-s": "model_S.pth", "dpot-m": "model_M.pth",
                  "dpot-l": "model_L.pth", "dpot-h": "model_H.pth"}


official_to_opzoo_name = RENAMES.get  # the opzoo ``pot`` name of an official DPOT key (None if unknown)


def read_official_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], Any]:
    """``(state_dict without 'module.', args or None)`` of an official file; nothing is executed."""
    payload = opzoo.safe_torch_load(path, allow=[argparse.Namespace])
    if isinstance(payload, Mapping) and "model" in payload:
        state_dict, args = payload["model"], payload.get("args")
    else:
        raise opzoo.CheckpointError(
            f"{path}: not an official DPOT checkpoint: expected a dict with key 'model' (and 'args'), "
            f"got {type(payload).__name__}{' with keys ' + ', '.join(map(str, payload)) if isinstance(payload, Mapping) else ''}"
        )
    if not isinstance(state_dict, Mapping) or not all(isinstance(v, torch.Tensor) for v in state_dict.values()):
        raise opzoo.CheckpointError(f"{path}: entry 'model' is not a state dict of tensors")
    state_dict = kit.strip_prefix(state_dict, "module.", str(path))
    return state_dict, args


def _shape(sd: Mapping[str, torch.Tensor], key: str, ndim: int, path: Path) -> tuple[int, ...]:
    return kit.tensor_shape(sd, key, str(path), "official DPOT", ndim)


def infer_model_args(sd: Mapping[str, torch.Tensor], args: Any, path: Path) -> dict[str, Any]:
    """The ``pot`` config of an official state dict, from its shapes (and ``args``)."""
    pos = sd.get("pos_embed")
    if pos is None or pos.ndim not in (4, 5):
        raise opzoo.CheckpointError(f"{path}: official DPOT key 'pos_embed' is missing or not [1, D, X, Y(, Z)]")
    spatial_dims = pos.ndim - 2
    width = pos.shape[1]
    hidden, in_plus_grid, patch, *_ = _shape(sd, "patch_embed.proj.0.weight", spatial_dims + 2, path)
    out_layer_dim = _shape(sd, "out_layer.0.weight", spatial_dims + 2, path)[1]
    out_channels = (hidden - 3) // patch
    if out_channels * patch + 3 != hidden:
        raise opzoo.CheckpointError(f"{path}: patch_embed.proj.0.weight has {hidden} outputs, not C_out*p + 3 (p = {patch})")
    depth = 1 + max((int(m.group(1)) for m in map(BLOCK_KEY.match, sd) if m), default=-1)
    if depth == 0:
        raise opzoo.CheckpointError(f"{path}: no 'blocks.N.*' keys")
    w1 = _shape(sd, "blocks.0.filter.w1", 4, path)
    mlp_hidden = _shape(sd, "blocks.0.mlp.0.weight", 4, path)[0]
    out_ct = _shape(sd, "out_layer.4.weight", spatial_dims + 2, path)[0]
    if out_ct % out_channels:
        raise opzoo.CheckpointError(f"{path}: out_layer.4.weight has {out_ct} outputs, not a multiple of C_out={out_channels}")
    modes = getattr(args, "modes", 32)
    if isinstance(modes, bool) or not isinstance(modes, int) or modes < 1:
        raise opzoo.CheckpointError(f"{path}: args.modes is {modes!r}; DPOT's training script stores a positive int")
    normalize = getattr(args, "normalize", False)
    if normalize not in (True, False) or not isinstance(normalize, (bool, int)):  # a store_true flag, or 0/1
        raise opzoo.CheckpointError(f"{path}: args.normalize is {normalize!r}; expected a boolean flag")
    act = getattr(args, "act", "gelu")
    if not isinstance(act, str):
        raise opzoo.CheckpointError(f"{path}: args.act is {act!r}; expected the activation's name")
    return {
        "in_channels": in_plus_grid - spatial_dims - 1,
        "out_channels": out_channels,
        "in_timesteps": _shape(sd, "time_agg_layer.w", 3, path)[0],
        "out_timesteps": out_ct // out_channels,
        "spatial_dims": spatial_dims,
        "img_size": [n * patch for n in pos.shape[2:]],
        "patch_size": patch,
        "width": width,
        "depth": depth,
        "mlp_ratio": mlp_hidden / width,
        "out_layer_dim": out_layer_dim,
        "n_cls": _shape(sd, "cls_head.4.weight", 2, path)[0],
        "act": act,
        "time_agg": "exp_mlp" if "time_agg_layer.gamma" in sd else "mlp",
        "normalize": bool(normalize),
        "block": "dpot",
        "mixer": "fourier-attention",
        "mixer_args": {"n_blocks": w1[1], "modes": modes},
        "residual": "plain",
        "residual_args": {},
    }


def map_state_dict(sd: Mapping[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """Rename official keys to opzoo's (1x1-conv MLP weights become Linear weights)."""
    out = RENAMES.apply(sd, str(path), "an official DPOT network")
    for name, value in out.items():
        if name.endswith(("mlp.fc1.weight", "mlp.fc2.weight")):
            out[name] = value.reshape(value.shape[0], value.shape[1])
    return out


def file_args(artifacts: opzoo.PretrainedArtifacts) -> dict[str, Any]:
    """The sizes the converted tensors have (the load check, :func:`opzoo.kit.file_args_agree`): width, depth, MLP
    ratio, head width, classes and Fourier-attention heads (the modes and flags are the file's ``args``, not its
    tensors: the model's are kept)."""
    sd, c = artifacts.state_dict, artifacts.model_config
    width = kit.tensor_shape(sd, "pos_embed", artifacts.preset, "DPOT")[1]
    return {"width": width, "depth": len({k.split(".")[1] for k in sd if k.startswith("blocks.")}),
            "mlp_ratio": kit.tensor_shape(sd, "blocks.0.mlp.fc1.weight", artifacts.preset, "DPOT")[0] / width,
            "out_layer_dim": kit.tensor_shape(sd, "out_head.0.weight", artifacts.preset, "DPOT")[1],
            "n_cls": kit.tensor_shape(sd, "cls_head.4.weight", artifacts.preset, "DPOT")[0],
            "mixer_args": {**c.mixer_args,
                           "n_blocks": kit.tensor_shape(sd, "blocks.0.mixer.w1", artifacts.preset, "DPOT")[1]}}


def matching_preset(model_args: Mapping[str, Any]) -> str | None:
    """The registered ``dpot-*`` preset these args are (all fields equal), if any."""
    registry = opzoo.get_registry()
    backbone = registry.get("backbone", "pot")
    config = backbone.config_class.from_dict(model_args, source="converted DPOT config")
    for name in registry.list_models("dpot-*"):
        preset = registry.preset(name)
        if backbone.config_class.from_dict(preset.args, source=name) == config:
            return name
    return None


def convert_dpot(path) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``dpot``: an official DPOT ``.pth`` -> :class:`opzoo.ConvertedCheckpoint`."""
    path = Path(path)
    sd, args = read_official_checkpoint(path)
    model_args = infer_model_args(sd, args, path)
    preset = matching_preset(model_args)
    return opzoo.ConvertedCheckpoint(
        architecture="pot",
        model_args=model_args,
        state_dict=map_state_dict(sd, path),
        pretrained_cfg={
            "channels": model_args["in_channels"],
            "resolution": model_args["img_size"],
            "in_timesteps": model_args["in_timesteps"],
            "normalization": "per-sample mean/std over space and time (model's own)" if model_args["normalize"] else "none",
            "source": f"official DPOT checkpoint {path.name}",
        },
        preset=preset,
    )

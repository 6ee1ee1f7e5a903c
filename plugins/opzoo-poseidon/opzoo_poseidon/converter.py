"""The ``poseidon`` converter: a Poseidon (scOT) checkpoint directory -> opzoo ``poseidon`` weights.

A checkpoint is what upstream's ``ScOT.save_pretrained`` writes (transformers 4.29.2 at v1-paper): ``config.json``
(a ``ScOTConfig``, ``model_type`` ``swinv2``) beside ``model.safetensors`` or, transformers' default then, a pickled
``pytorch_model.bin``. opzoo reads the safetensors file as it is and the ``.bin`` with ``torch.load(weights_only=True)``
only (never unpickling code). The tensor names are upstream's; opzoo's network keeps them under ``net.``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

import opzoo

from .provenance import pretrained_cfg

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# what opzoo implements of ScOTConfig: every published checkpoint's settings (scOT/train.py @ v1-paper)
FIXED = {"model_type": "swinv2", "residual_model": "convnext", "use_conditioning": True, "learn_residual": False,
         "use_absolute_embeddings": False, "hidden_act": "gelu", "qkv_bias": True}
SIZES = ("image_size", "patch_size", "num_channels", "num_out_channels", "embed_dim", "depths", "num_heads",
         "skip_connections", "window_size", "mlp_ratio", "layer_norm_eps")
BUFFERS = ("relative_coords_table", "relative_position_index")  # computed by opzoo (older transformers saved them)


def weights_file(directory: Path) -> Path:
    """The directory's weights: model.safetensors where present, else pytorch_model.bin."""
    for name in WEIGHT_FILES:
        if (directory / name).exists():
            return directory / name
    raise opzoo.CheckpointError(f"{directory}: neither {' nor '.join(WEIGHT_FILES)} is there: not a Poseidon "
                                "checkpoint directory (fetch one with `hf download camlab-ethz/Poseidon-T`)")


def read_config(path: Path) -> dict[str, Any]:
    """The ``config.json`` beside the weights, as a dict (one-line errors naming the file)."""
    if not path.is_file():
        raise opzoo.CheckpointError(f"{path}: missing; a Poseidon checkpoint is read with the config.json beside it")
    config = opzoo.read_json(path, "a ScOTConfig config.json", error=opzoo.CheckpointError)
    if not isinstance(config, dict):
        raise opzoo.CheckpointError(f"{path}: expected a JSON object (a ScOTConfig), got {type(config).__name__}")
    return config


def model_args(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``poseidon`` config a ScOTConfig describes; refuses what opzoo does not implement, naming the key."""
    missing = [k for k in SIZES if k not in config]
    if missing:
        raise opzoo.CheckpointError(f"{where}: no {', '.join(missing)}: not a ScOTConfig")
    refused = {k: config.get(k, v) for k, v in FIXED.items() if config.get(k, v) != v}
    if refused:
        raise opzoo.CheckpointError(f"{where}: " + ", ".join(f"{k}={v!r}" for k, v in refused.items())
                                    + " is not what opzoo-poseidon implements (the published checkpoints' "
                                    + ", ".join(f"{k}={v!r}" for k, v in FIXED.items()) + ")")
    if any(int(w or 0) for w in config.get("pretrained_window_sizes") or ()):
        raise opzoo.CheckpointError(f"{where}: pretrained_window_sizes {config['pretrained_window_sizes']} are not "
                                    "zero (Swin-v2's transfer of position tables is not implemented)")

    def ints(key: str) -> tuple[int, ...]:
        value = config[key]
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise opzoo.CheckpointError(f"{where}: {key} must be a list of integers, got {value!r}")
        return tuple(value)

    def one(key: str, kind=int):
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
            raise opzoo.CheckpointError(f"{where}: {key} must be {'a number' if kind is float else 'an integer'}, "
                                        f"got {value!r}")
        return kind(value)

    if isinstance(config["image_size"], list) and len(set(config["image_size"])) == 1:  # [n, n]: square
        config = {**config, "image_size": config["image_size"][0]}
    args = {"in_channels": one("num_channels"), "out_channels": one("num_out_channels"),
            "image_size": one("image_size"),
            "patch_size": one("patch_size"), "embed_dim": one("embed_dim"), "depths": ints("depths"),
            "num_heads": ints("num_heads"), "skip_connections": ints("skip_connections"),
            "window_size": one("window_size"), "mlp_ratio": one("mlp_ratio", float),
            "layer_norm_eps": one("layer_norm_eps", float)}
    try:
        from .backbone import PoseidonConfig

        PoseidonConfig(**args).validate(where)
    except opzoo.ConfigError as e:
        raise opzoo.CheckpointError(str(e)) from None
    return args


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors in opzoo's names (``net.`` + upstream's); the ``.bin`` through ``weights_only``."""
    if not path.is_file():
        raise opzoo.CheckpointError(f"{path}: {'not a regular file (a FIFO, device or directory)' if path.exists() else 'missing'}")
    if path.suffix == ".safetensors":
        sd = _read_safetensors(path)
    else:
        sd = opzoo.safe_torch_load(path)
        if not isinstance(sd, Mapping) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            raise opzoo.CheckpointError(f"{path}: not a state dict of tensors (what ScOT.save_pretrained writes)")
    return {f"net.{k}": v for k, v in sd.items() if not str(k).endswith(BUFFERS)}


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise opzoo.CheckpointError(f"{path}: not a readable safetensors file ({e})") from None


def convert_poseidon(path) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``poseidon``: a checkpoint directory (or its weights file, config.json beside it) ->
    :class:`opzoo.ConvertedCheckpoint`."""
    path = Path(path)
    weights = weights_file(path) if path.is_dir() else path
    config_path = weights.with_name("config.json")
    args = model_args(read_config(config_path), str(config_path))
    sd = read_tensors(weights)
    # No preset is matched: a checkpoint does not say which data's constants it was trained with (a fine-tuned one
    # of Poseidon-T's sizes has its own), so the converted model takes and gives the network's normalized units.
    cfg = pretrained_cfg(None)
    cfg["source"] = f"Poseidon checkpoint {weights.parent} (converted by opzoo's 'poseidon' converter)"
    return opzoo.ConvertedCheckpoint(architecture="poseidon", model_args=args, state_dict=sd, pretrained_cfg=cfg)

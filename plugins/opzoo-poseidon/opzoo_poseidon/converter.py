"""The ``poseidon`` converter: a Poseidon (scOT) checkpoint directory -> opzoo ``poseidon`` weights.

A checkpoint is what upstream's ``ScOT.save_pretrained`` writes (transformers 4.29.2 at v1-paper): ``config.json``
(a ``ScOTConfig``, ``model_type`` ``swinv2``) beside ``model.safetensors`` or, transformers' default then, a pickled
``pytorch_model.bin``. opzoo reads the safetensors file as it is and the ``.bin`` with ``torch.load(weights_only=True)``
only (never unpickling code). The tensor names are upstream's; opzoo's network keeps them under ``net.``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

import opzoo
from opzoo import kit

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
    if not (path.exists() or path.is_symlink()):
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
    return kit.read_safetensors(path)


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


def file_args(artifacts: opzoo.PretrainedArtifacts) -> dict[str, Any]:
    """The config the file's ``config.json`` builds (the load check, :func:`opzoo.kit.file_args_agree`; the tensors
    are held to that network by opzoo's own check, "weights fit the preset")."""
    path = artifacts.files.get("config.json") or next(iter(artifacts.files.values())).with_name("config.json")
    return model_args(read_config(path), str(path))


# ---- upstream's own scOT, run side by side with opzoo's by `opzoo benchmark` and by the parity tests ----------------
# Poseidon is not on the package index (the index's ``scOT`` is an unrelated EEG toolbox): ``OPZOO_POSEIDON_REPO`` names
# a checkout at v1-paper, and its network needs the transformers of its time, 4.29.2, importable beside opzoo
# (``make poseidon-reference`` installs it into .venv/reference/poseidon-transformers-4.29.2; put that directory on
# ``PYTHONPATH``).
REPO_ENV = "OPZOO_POSEIDON_REPO"
TRANSFORMERS = "4.29.2"


def upstream_classes(repo: str | os.PathLike | None = None):
    """``(ScOT, ScOTConfig)`` from the checkout ``repo`` (default ``$OPZOO_POSEIDON_REPO``), or UpstreamUnavailable."""
    try:
        import transformers
    except ImportError:
        raise opzoo.UpstreamUnavailable(f"scOT needs transformers {TRANSFORMERS}: run `make poseidon-reference` and put "
                                        ".venv/reference/poseidon-transformers-4.29.2 on PYTHONPATH") from None
    if transformers.__version__ != TRANSFORMERS:
        raise opzoo.UpstreamUnavailable(f"scOT's Swin-v2 parts come from transformers, and the weights were trained "
                                        f"with {TRANSFORMERS}; this is {transformers.__version__}")
    module = kit.import_from_checkout(REPO_ENV, "scOT.model", family="Poseidon", url="https://github.com/camlab-ethz/"
                                      "poseidon", at="v1-paper", marker="scOT/model.py", repo=repo)
    return module.ScOT, module.ScOTConfig


def upstream_config(model, config_class):
    c = model.config
    return config_class(image_size=c.image_size, patch_size=c.patch_size, num_channels=c.in_channels,
                        num_out_channels=c.out_channels, embed_dim=c.embed_dim, depths=list(c.depths),
                        num_heads=list(c.num_heads), skip_connections=list(c.skip_connections),
                        window_size=c.window_size, mlp_ratio=c.mlp_ratio, qkv_bias=True, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, drop_path_rate=0.0, hidden_act="gelu",
                        use_absolute_embeddings=False, initializer_range=0.02, layer_norm_eps=c.layer_norm_eps, p=1,
                        residual_model="convnext", use_conditioning=True, learn_residual=False)


class _ScOTAtLeadTime(nn.Module):
    """Upstream's ``ScOT`` called as opzoo's benchmark calls a module, on the standardized frames ``[B, C, n, n]``
    alone: every sample at the one lead time ``lead_time``."""

    def __init__(self, net, lead_time: float):
        super().__init__()
        self.net, self.lead_time = net, lead_time

    def forward(self, frames):
        time = frames.new_full((frames.shape[0],), self.lead_time)
        return self.net(pixel_values=frames, time=time).output


def upstream_network(model, repo=None) -> nn.Module:
    """Upstream's ``ScOT`` at ``model``'s sizes, holding ``model``'s weights, in eval mode."""
    scot, config_class = upstream_classes(repo)
    net = scot(upstream_config(model, config_class))
    net.load_state_dict({k[len("net."):]: v for k, v in model.state_dict().items() if k.startswith("net.")},
                        strict=True)
    return _ScOTAtLeadTime(net.to(next(model.parameters()).dtype).eval(), model.config.lead_time)


def build_upstream_poseidon(model, x) -> opzoo.Upstream:
    """Their ``ScOT`` with the model's weights, on the model's standardized frame and one step's lead time."""
    if model.config.out_timesteps != 1:
        raise opzoo.UpstreamUnavailable("upstream predicts one lead time per call; benchmark with out_timesteps=1")
    net = upstream_network(model)
    return opzoo.Upstream(f"Poseidon scOT (v1-paper, transformers {TRANSFORMERS}; {os.environ.get(REPO_ENV)})", net,
                          inputs=lambda t: model._frame(t).detach().contiguous(),
                          outputs=lambda y: y.permute(0, 2, 3, 1).unsqueeze(3) if model.config.field_mean is None
                          else (y * model.field_std.view(1, -1, 1, 1) + model.field_mean.view(1, -1, 1, 1))
                          .permute(0, 2, 3, 1).unsqueeze(3))

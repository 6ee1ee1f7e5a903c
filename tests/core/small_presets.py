"""Every registered preset at small dims (same architecture and components), for tests that
must cover all presets quickly: compile, bf16 autocast, and the GPU report."""

from __future__ import annotations

import os
from typing import Any

import torch

import opzoo

SMALL_WIDTH = 32
SMALL_PATCH = 4


def device_under_test() -> torch.device:
    """``OPZOO_TEST_DEVICE`` (``cpu`` by default; ``benchmarks/gpu_report.py`` sets ``cuda``)."""
    return torch.device(os.environ.get("OPZOO_TEST_DEVICE", "cpu"))


def small_overrides(name: str) -> dict[str, Any]:
    """Config overrides that shrink preset ``name``: width 32, depth 1, 16^d inputs, few modes.
    Fields a preset's config does not have are left alone; mixer, feed-forward and residual
    arguments keep their values except the Fourier head count and modes."""
    preset = opzoo.get_registry().preset(name)
    args = dict(preset.args)
    out: dict[str, Any] = {}
    d = int(args.get("spatial_dims", 2))
    if "depth" in args:
        out["depth"] = 1
    if "width" in args:
        out["width"] = SMALL_WIDTH
    if "img_size" in args:  # POT: 16^d pixels, patch 4: a 4^d latent, modes 2 truncate it
        out["img_size"] = [4 * SMALL_PATCH] * d
        out["patch_size"] = SMALL_PATCH
    if "out_layer_dim" in args:
        out["out_layer_dim"] = 8
    if isinstance(args.get("mixer_args"), dict):
        mixer_args = dict(args["mixer_args"])
        if "n_blocks" in mixer_args:
            mixer_args["n_blocks"] = 4
        if "modes" in mixer_args:
            mixer_args["modes"] = 2
        out["mixer_args"] = mixer_args
    if "modes" in args:  # FNO: 8^d grid, 2 modes per corner
        out["modes"] = 2
    return out


def small_model(name: str, seed: int = 0) -> opzoo.Backbone:
    torch.manual_seed(seed)
    return opzoo.load(name, **small_overrides(name))


def small_input(model: opzoo.Backbone, batch: int = 2, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, target) for ``model``: ``[B, *S, T_in, C_in]``, ``[B, *S, T_out, C_out]``."""
    c = model.config
    d = int(getattr(c, "spatial_dims", 2))
    sizes = list(getattr(c, "img_size", None) or [8] * d)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, *sizes, c.in_timesteps, c.in_channels, generator=g)
    y = torch.randn(batch, *sizes, c.out_timesteps, c.out_channels, generator=g)
    return x, y


def all_presets() -> list[str]:
    return opzoo.list_models()

"""The grid and the input a model is run at when the user names none: ``opzoo benchmark`` measures, and ``opzoo
export`` traces and checks, at these (docs/benchmarks.md, docs/export.md)."""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from ..errors import ConfigError

DEFAULT_GRID = 64  # per axis, for a model with no pretrained grid (the FNO presets)


def input_grid(model, resolution: Sequence[int] | None) -> tuple[list[int], str]:
    """The spatial grid a preset is run at: ``resolution`` if given, else the grid its weights were trained
    at, else its own ``img_size``, else ``DEFAULT_GRID`` per axis, brought to the nearest grid the model takes
    (:meth:`opzoo.Backbone.grid_for`; said in the note). A model whose config has no
    ``spatial_dims`` (one that takes any number of axes, e.g. MORPH) is run at the axes given."""
    c = model.config
    d = int(getattr(c, "spatial_dims", 2))
    if resolution:
        if len(resolution) != d and hasattr(c, "spatial_dims"):
            raise ConfigError(f"the grid {list(resolution)} (--resolution, --grid): {model.preset_name} has {d} spatial "
                              f"axes; give {d} sizes")
        return list(resolution), ""
    for grid in (model.pretrained_cfg.get("resolution"), getattr(c, "img_size", None), getattr(c, "resolution", None)):
        if grid:
            return list(grid), ""
    taken, _ = model.grid_for([DEFAULT_GRID] * d) if hasattr(model, "grid_for") else (None, "")
    if taken and list(taken) != [DEFAULT_GRID] * d:  # a stem that takes only some grids (Walrus: 32, 128, ... in 2-D)
        return list(taken), f"no pretrained grid: {DEFAULT_GRID} per axis, as {model.preset_name or 'the model'} takes it"
    return [DEFAULT_GRID] * d, f"no pretrained grid: {DEFAULT_GRID} per axis"


def grid_step(model) -> int:
    """The step between two grids a model may take on every axis: even (an rfft's half-spectrum), a multiple of its
    ``size_multiple`` (a U-Net's down-sampling, a window) and of its patch size."""
    c = model.config
    patch = getattr(c, "patch_size", None) or 1
    patches = [int(p) for p in patch] if isinstance(patch, (list, tuple)) else [int(patch)]
    return math.lcm(2, int(getattr(model, "size_multiple", 1) or 1), *patches)


def example_input(model, batch: int, grid: Sequence[int], seed: int = 0) -> Tensor:
    """``[batch, *grid, T_in, C_in]`` standard-normal values, drawn from ``seed`` (float32)."""
    c = model.config
    return torch.randn(batch, *grid, c.in_timesteps, c.in_channels, generator=torch.Generator().manual_seed(seed))

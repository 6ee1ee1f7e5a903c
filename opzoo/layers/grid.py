"""Coordinate channels appended to the input frames, as DPOT and FNO do (public as ``opzoo.append_grid``)."""

from __future__ import annotations

import torch
from torch import Tensor


def append_grid(x: Tensor, time: bool = True) -> Tensor:
    """``[B, *S, T, C] -> [B, *S, T, C + len(S) (+1)]``: each axis gets ``linspace(0, 1, n)``.

    The coordinate channels follow the data channels in axis order (x, y[, z][, t]).
    """
    *lead, t, _ = x.shape
    sizes = [*lead[1:], t] if time else lead[1:]
    coords = torch.meshgrid(*[_unit_interval(n, x) for n in sizes], indexing="ij")
    grid = torch.stack(coords, dim=-1)  # [*S(, T), n_axes]
    if not time:
        grid = grid.unsqueeze(-2).expand(*lead[1:], t, grid.shape[-1])
    return torch.cat([x, grid.expand(x.shape[0], *grid.shape)], dim=-1)


def _unit_interval(n: int, like: Tensor) -> Tensor:
    """``linspace(0, 1, n)``; while ``torch.export`` traces, ``arange(n) / (n - 1)`` (linspace fixes ``n`` in the
    graph, arange keeps it symbolic; the two differ by at most one rounding: docs/export.md)."""
    if torch.compiler.is_exporting():
        return torch.arange(n, device=like.device, dtype=like.dtype) / max(n - 1, 1)
    return torch.linspace(0, 1, n, device=like.device, dtype=like.dtype)

"""Sparse dispatch: each expert computes only on the groups routed to it.

``y[g] = sum_{j < k} weights[g, j] * experts[indices[g, j]](x[g])``: the ``G * k`` assignments are
sorted by expert (stable), split by the per-expert counts, each expert runs once on its gathered
rows, and the weighted outputs are scattered back with one ``index_add_``. An expert with no rows
is never called (no compute, no autograd node; its parameters get no gradient).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from opzoo import Routing


def dispatch(x: Tensor, routing: Routing, experts: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
    """``x [G, *F] -> [G, *F']``: the routed, weighted sum of expert outputs (sparse)."""
    g, k = routing.indices.shape
    flat = routing.indices.reshape(-1)                                   # [G k]
    order = torch.argsort(flat, stable=True)
    rows = torch.arange(g, device=x.device).repeat_interleave(k)[order]  # source group of each sorted slot
    weights = routing.weights.reshape(-1)[order]
    counts = torch.bincount(flat, minlength=len(experts)).tolist()
    outs = []
    for e, (r, n) in enumerate(zip(rows.split(counts), counts)):
        if n:
            outs.append(experts[e](x[r]))
    y = torch.cat(outs) if len(outs) > 1 else outs[0]
    y = y * weights.to(y.dtype).view(-1, *([1] * (y.ndim - 1)))
    out = y.new_zeros((g, *y.shape[1:]))
    return out.index_add_(0, rows, y)


__all__ = ["dispatch"]

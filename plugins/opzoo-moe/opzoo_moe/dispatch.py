"""Sparse dispatch: each expert computes only on the groups routed to it.

``y[g] = sum_{j < k} weights[g, j] * experts[indices[g, j]](x[g])``: the ``G * k`` assignments are
sorted by expert (stable), split by the per-expert counts, each expert runs once on its gathered
rows, and the weighted outputs are scattered back with one ``index_add``.

The per-expert counts are read from the device once (``tolist``). In eager mode they are plain
ints, and an expert with no rows is never called (no compute, no autograd node; its parameters get
no gradient). Under ``torch.compile(fullgraph=True)`` they become unbacked symbolic sizes (the
graph serves every routing without recompiling): the counts are computed with a fixed-size
``scatter_add`` (:func:`expert_counts`), ``torch._check`` tells the
compiler they are sizes summing to ``G * k``, and an expert whose count is only known at run time
is called on its slice, which may be empty (zero rows: zero work, zero gradient). Experts must
therefore accept an empty batch, and reshape with explicit sizes (``reshape(n, -1, d)`` needs
``n != 0`` to infer the ``-1``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor

from opzoo import Routing

from .routers import expert_counts


def guard_or_true(condition) -> bool:
    """torch's ``guard_or_true`` while compiling (an unbacked size: assume the expert got inputs); in eager
    mode sizes are plain ints. Imported only when compiling: its module costs ~0.5 s of ``opzoo list``."""
    if not torch.compiler.is_compiling():
        return bool(condition)
    try:
        from torch.fx.experimental.symbolic_shapes import guard_or_true as torch_guard_or_true
    except ImportError:  # an older torch without it (pyproject allows >= 2.4)
        return bool(condition)
    return torch_guard_or_true(condition)



def dispatch(x: Tensor, routing: Routing, experts: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
    """``x [G, *F] -> [G, *F']``: the routed, weighted sum of expert outputs (sparse; dense while ``torch.export``
    traces: :func:`dense_dispatch`)."""
    if torch.compiler.is_exporting():
        return dense_dispatch(x, routing, experts)
    g, k = routing.indices.shape
    order = torch.argsort(routing.indices.reshape(-1), stable=True)          # [G k], grouped by expert
    rows = torch.div(order, k, rounding_mode="floor")                        # source group of each sorted slot
    weights = routing.weights.reshape(-1)[order]
    sizes = expert_counts(routing.indices, len(experts)).tolist()
    for n in sizes:
        torch._check(n >= 0)
    torch._check(sum(sizes) == g * k)
    xs = x.index_select(0, rows).split(sizes)  # one gather; the slices are contiguous views
    outs = [experts[e](xe) for e, (xe, n) in enumerate(zip(xs, sizes)) if guard_or_true(n > 0)]
    y = torch.cat(outs) if len(outs) > 1 else outs[0]
    y = y * weights.to(y.dtype).view(-1, *([1] * (y.ndim - 1)))
    return y.new_zeros((g, *y.shape[1:])).index_add_(0, rows, y)


def dense_dispatch(x: Tensor, routing: Routing, experts: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
    """:func:`dispatch`'s sum with every expert run on every group, weighted by its routing weight (zero where it was
    not chosen): no data-dependent sizes, which an exported graph (ONNX has no stable sort or data-sized split) needs.
    The same function up to the order of the float sums (docs/export.md); E times the experts' compute."""
    y = None
    for e, expert in enumerate(experts):
        chosen = routing.indices == e                                                         # [G, k]
        weight = (routing.weights * chosen.to(routing.weights.dtype)).sum(-1)                 # [G]
        out = expert(x)
        shape = (-1, *([1] * (out.ndim - 1)))
        # where not chosen, nothing (a zero weight times an expert's inf would be NaN; the sparse sum never sees it)
        term = torch.where(chosen.any(-1).view(shape), out * weight.to(out.dtype).view(shape), 0.0)
        y = term if y is None else y + term
    return y


__all__ = ["dispatch", "dense_dispatch"]

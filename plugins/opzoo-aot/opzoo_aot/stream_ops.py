"""The stream operations of an AOT sub-layer: one map for the update and the aggregation, and the
pooled summary carried through the update.

``streams [B, n, F]`` (``F = S·D``) with an update pending (``y [B, F]``, ``H [B, n, n]``,
``h_post [B, n]``) and aggregation weights ``h [B, n]``::

    current = H streams + h_post ⊗ y          (streams itself when H is None; then y is None)
    u       = Σ_i h[:, i] current[:, i]

``combine_streams`` returns ``(current, u)``: applying the last sub-layer's update and aggregating
for the next branch is one pass over the streams, because ``u = (H^T h)·streams + (h·h_post) y``
needs no pass over ``current``. The same map with ``h = softmax(g)`` is the gated readout. On CPU
(float32/float64, ``n <= 16``) a C kernel (csrc/aot_kernels_impl.h) computes both in one pass and
the whole backward in one more; elsewhere the equations run as PyTorch ops.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import cpu_kernels

__all__ = ["combine_streams", "combine_streams_torch", "carry_pooled", "pool_streams"]


def combine_streams_torch(streams: Tensor, y: Tensor | None, H: Tensor | None, h_post: Tensor | None,
                          h: Tensor | None, need_current: bool = True) -> tuple[Tensor | None, Tensor | None]:
    """The map in PyTorch ops (differentiable by autograd)."""
    current = streams
    if H is not None:
        current = torch.bmm(H, streams)
        if y is not None:
            current = current + h_post.unsqueeze(-1) * y.unsqueeze(1)
    u = None if h is None else torch.bmm(h.unsqueeze(1), current).squeeze(1)
    return (current if need_current else None), u


def _contiguous(*tensors):
    return [None if t is None else t.contiguous() for t in tensors]


def run_streams(kernel, streams: Tensor, y: Tensor | None, H: Tensor | None, h_post: Tensor | None,
                h: Tensor | None, need_current: bool) -> tuple[Tensor | None, Tensor | None]:
    """``aot_streams_forward`` on contiguous inputs: ``(current or None, u or None)``."""
    b, n, f = streams.shape
    current = cpu_kernels.pooled_empty(streams, b, n, f) if H is not None and need_current else None
    u = cpu_kernels.pooled_empty(streams, b, f) if h is not None else None
    p = cpu_kernels.ptr
    status = kernel.forward(b, n, f, p(streams), p(y), p(H), p(h_post), p(h), p(current), p(u), torch.get_num_threads())
    cpu_kernels.check_status(status, "stream")
    return current, u


def run_streams_backward(kernel, streams: Tensor, y: Tensor | None, H: Tensor | None, h_post: Tensor | None,
                         h: Tensor | None, grad_current: Tensor | None, grad_u: Tensor | None,
                         need: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
    """``aot_streams_backward``: ``(g_streams, g_y, g_H, g_h_post, g_h)``, each None unless ``need``
    asks for it and the input exists."""
    b, n, f = streams.shape
    new = streams.new_empty
    # contiguous copies stay referenced until the kernel returns
    grad_current, grad_u = _contiguous(grad_current, grad_u)
    g_streams = cpu_kernels.pooled_empty(streams, b, n, f) if need[0] else None
    g_y = cpu_kernels.pooled_empty(streams, b, f) if need[1] and y is not None else None
    g_H = new(b, n, n) if need[2] and H is not None else None
    g_h_post = new(b, n) if need[3] and h_post is not None else None
    g_h = new(b, n) if need[4] and h is not None else None
    p = cpu_kernels.ptr
    status = kernel.backward(b, n, f, p(streams), p(y), p(H), p(h_post), p(h), p(grad_current), p(grad_u),
                             p(g_streams), p(g_y), p(g_H), p(g_h_post), p(g_h), torch.get_num_threads())
    cpu_kernels.check_status(status, "stream")
    if g_h_post is not None and y is None:
        g_h_post.zero_()  # h_post scales y, which was None
    return g_streams, g_y, g_H, g_h_post, g_h


class _CombineStreamsCPU(torch.autograd.Function):
    """The map through ``aot_streams_forward/backward`` (csrc/aot_kernels_impl.h)."""

    @staticmethod
    def forward(ctx, streams, y, H, h_post, h, need_current, kernel):
        inputs = _contiguous(streams, y, H, h_post, h)
        ctx.save_for_backward(*inputs)
        ctx.kernel = kernel
        return run_streams(kernel, *inputs, need_current)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_current, grad_u):
        grads = run_streams_backward(ctx.kernel, *ctx.saved_tensors, grad_current, grad_u, ctx.needs_input_grad)
        return (*grads, None, None)


def combine_streams(streams: Tensor, y: Tensor | None = None, H: Tensor | None = None,
                    h_post: Tensor | None = None, h: Tensor | None = None,
                    need_current: bool = True) -> tuple[Tensor | None, Tensor | None]:
    """``(current [B, n, F] or None, u [B, F] or None)``; all inputs in one dtype (see the module doc)."""
    if H is None and y is not None:
        raise ValueError("combine_streams: y without H (a pending update needs its mixing matrix)")
    kernel = cpu_kernels.stream_kernel(streams, (y, H, h_post, h))
    if kernel is None:
        return combine_streams_torch(streams, y, H, h_post, h, need_current)
    current, u = _CombineStreamsCPU.apply(streams, y, H, h_post, h, need_current, kernel)
    return (streams if H is None and need_current else current), u


def carry_pooled(y: Tensor, H: Tensor, h_post: Tensor, pooled: Tensor) -> Tensor:
    """The spatial mean of the updated streams from the old one: ``y [B, S, D], H [B, n, n],
    h_post [B, n], pooled [B, n, D] -> [B, n, D]`` in ``pooled``'s dtype, exact by linearity
    (``mean_S(H X + h_post y) = H mean_S(X) + h_post mean_S(y)``). The CPU kernels' path fuses it;
    this is the PyTorch form."""
    y_mean = y.mean(dim=1, dtype=pooled.dtype)  # [B, D]
    return torch.baddbmm(h_post.unsqueeze(-1) * y_mean.unsqueeze(1), H, pooled)


def pool_streams(streams: Tensor, dim: int) -> Tensor:
    """``[B, n, S·D] -> [B, n, D]``: float32 mean over the spatial positions of width ``dim``."""
    b, n, f = streams.shape
    return streams.view(b, n, f // dim, dim).mean(dim=2, dtype=torch.float32)

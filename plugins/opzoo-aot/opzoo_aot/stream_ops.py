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


class _CombineStreamsCPU(torch.autograd.Function):
    """The map through ``aot_streams_forward/backward`` (csrc/aot_kernels_impl.h)."""

    @staticmethod
    def forward(ctx, streams, y, H, h_post, h, need_current, kernel):
        streams, y, H, h_post, h = _contiguous(streams, y, H, h_post, h)
        b, n, f = streams.shape
        current = cpu_kernels.pooled_empty(streams, b, n, f) if H is not None and need_current else None
        u = cpu_kernels.pooled_empty(streams, b, f) if h is not None else None
        p, threads = cpu_kernels.ptr, torch.get_num_threads()
        status = kernel.forward(b, n, f, p(streams), p(y), p(H), p(h_post), p(h), p(current), p(u), threads)
        cpu_kernels.check_status(status, "stream")
        ctx.save_for_backward(streams, y, H, h_post, h)
        ctx.kernel = kernel
        return current, u

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_current, grad_u):
        streams, y, H, h_post, h = ctx.saved_tensors
        need = ctx.needs_input_grad
        # contiguous copies stay referenced until the kernel returns
        grad_current, grad_u = _contiguous(grad_current, grad_u)
        b, n, f = streams.shape
        new = streams.new_empty
        gX = cpu_kernels.pooled_empty(streams, b, n, f) if need[0] else None
        gy = cpu_kernels.pooled_empty(streams, b, f) if need[1] and y is not None else None
        gH = new(b, n, n) if need[2] and H is not None else None
        ghp = new(b, n) if need[3] and h_post is not None else None
        gh = new(b, n) if need[4] and h is not None else None
        p, threads = cpu_kernels.ptr, torch.get_num_threads()
        status = ctx.kernel.backward(b, n, f, p(streams), p(y), p(H), p(h_post), p(h), p(grad_current), p(grad_u),
                                     p(gX), p(gy), p(gH), p(ghp), p(gh), threads)
        cpu_kernels.check_status(status, "stream")
        if ghp is not None and y is None:
            ghp.zero_()  # h_post scales y, which was None
        return gX, gy, gH, ghp, gh, None, None


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


class _CarryPooled(torch.autograd.Function):
    """``pooled' = H pooled + h_post ⊗ mean_S(y)``: ``y [B, S, D], H [B, n, n], h_post [B, n],
    pooled [B, n, D] -> [B, n, D]`` in the dtype of ``pooled`` (float32 in the residual). One node; the gradient reaching ``y`` is a broadcast
    view, which autograd adds into y's other gradient in place."""

    @staticmethod
    def forward(ctx, y, H, h_post, pooled):
        y_mean = y.mean(dim=1, dtype=pooled.dtype)  # [B, D]
        ctx.save_for_backward(H, h_post, pooled, y_mean)
        ctx.y_shape, ctx.y_dtype = y.shape, y.dtype
        return torch.baddbmm(h_post.unsqueeze(-1) * y_mean.unsqueeze(1), H, pooled)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        H, h_post, pooled, y_mean = ctx.saved_tensors
        b, s, d = ctx.y_shape
        need = ctx.needs_input_grad
        grad_y = grad_H = grad_h_post = grad_pooled = None
        if need[0]:
            grad_mean = torch.bmm(h_post.unsqueeze(1), grad).squeeze(1)  # [B, D]
            grad_y = (grad_mean / s).to(ctx.y_dtype).unsqueeze(1).expand(b, s, d)
        if need[1]:
            grad_H = torch.bmm(grad, pooled.transpose(1, 2))
        if need[2]:
            grad_h_post = torch.bmm(grad, y_mean.unsqueeze(-1)).squeeze(-1)
        if need[3]:
            grad_pooled = torch.bmm(H.transpose(1, 2), grad)
        return grad_y, grad_H, grad_h_post, grad_pooled


def carry_pooled(y: Tensor, H: Tensor, h_post: Tensor, pooled: Tensor) -> Tensor:
    """The spatial mean of the updated streams from the old one: ``[B, S, D], [B, n, n], [B, n],
    [B, n, D] -> [B, n, D]``, exact by linearity (``mean_S(H X + h_post y) = H mean_S(X) + h_post mean_S(y)``)."""
    return _CarryPooled.apply(y, H, h_post, pooled)


def pool_streams(streams: Tensor, dim: int) -> Tensor:
    """``[B, n, S·D] -> [B, n, D]``: float32 mean over the spatial positions of width ``dim``."""
    b, n, f = streams.shape
    return streams.view(b, n, f // dim, dim).mean(dim=2, dtype=torch.float32)

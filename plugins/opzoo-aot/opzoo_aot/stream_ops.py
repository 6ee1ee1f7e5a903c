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

__all__ = ["combine_streams", "combine_streams_torch", "carry_pooled", "pool_streams", "stream_dots"]


DOT_CHUNK = 1024  # features per float32 partial dot product (a few BLAS register blocks)


def stream_dots(a: Tensor, b: Tensor) -> Tensor:
    """``a [B, p, F], b [B, q, F] -> [B, p, q]`` float64: ``Σ_f a[:, i, f] b[:, j, f]``, accurate to
    float32 rounding of the products, the way the C kernels reduce.

    Why not ``a @ b^T``: a float32 GEMM over ``F`` (65536 and more) accumulates each entry with an
    error of a few 1e-6 of ``|a||b|``. The gradients of ``H_res``, ``h_pre`` and the readout weights
    are such dot products with the streams, and when the streams are close to one another (the
    usual state: they start as copies and a residual keeps them close) every entry of a row is
    nearly the same large number. The Sinkhorn backward and the simplex/softmax backward remove that
    common part exactly (rows of ``H_res`` and the weights sum to 1), so what remains, the whole
    gradient, is 100-1000x smaller than the entries and inherits their absolute error: ~1e-3
    relative (issue 11). Here each chunk of :data:`DOT_CHUNK` features is one small float32 GEMM
    (one strided batched call per sample, no copies) and the chunks are summed in float64.
    """
    if torch.compiler.is_compiling():  # one fused reduction with a float64 accumulator
        return (a.unsqueeze(2).double() * b.unsqueeze(1).double()).sum(-1)
    a, b = a.contiguous(), b.contiguous()
    f = a.shape[-1]
    chunks, main = f // DOT_CHUNK, (f // DOT_CHUNK) * DOT_CHUNK
    out = torch.zeros(a.shape[0], a.shape[1], b.shape[1], dtype=torch.float64, device=a.device)
    if chunks > 1:
        for k in range(a.shape[0]):  # per sample: [chunks, p, K] @ [chunks, K, q], strided views
            ak = a[k, :, :main].unflatten(-1, (chunks, DOT_CHUNK)).transpose(0, 1)
            bk = b[k, :, :main].unflatten(-1, (chunks, DOT_CHUNK)).permute(1, 2, 0)
            out[k] = torch.bmm(ak, bk).sum(0, dtype=torch.float64)
        if main < f:
            out += torch.bmm(a[:, :, main:], b[:, :, main:].transpose(1, 2)).double()
    else:
        out += torch.bmm(a, b.transpose(1, 2)).double()
    return out


def _as_rows(t: Tensor) -> Tensor:
    """``[B, F] -> [B, 1, F]``."""
    return t.unsqueeze(1)


class _CombineStreamsTorch(torch.autograd.Function):
    """The map in PyTorch ops, with a backward whose reductions over the features are accurate
    (:func:`stream_dots`). With ``a = H^T h`` and ``c = h · h_post``::

        g_streams = H^T G + a ⊗ g_u            g_y = h_post^T G + c g_u
        g_H[i, j] = <G_i + h_i g_u, X_j>         g_h_post[i] = <G_i + h_i g_u, y>
        g_h[i]    = Σ_j H[i, j] <g_u, X_j> + h_post[i] <g_u, y>

    (``G = dL/dcurrent``, ``g_u = dL/du``; without ``H``, ``current = X``).
    """

    @staticmethod
    def forward(ctx, streams, y, H, h_post, h, need_current):
        ctx.save_for_backward(streams, y, H, h_post, h)
        current = u = None
        if H is not None:
            if need_current:
                current = torch.bmm(H, streams)
                if y is not None:
                    current = current.addcmul_(h_post.unsqueeze(-1), y.unsqueeze(1))
            if h is not None:  # u = (H^T h)·X + (h·h_post) y, no pass over current
                u = torch.bmm(torch.bmm(h.unsqueeze(1), H), streams).squeeze(1)
                if y is not None:
                    u = u.addcmul_((h * h_post).sum(1, keepdim=True), y)
        elif h is not None:  # current is the streams themselves (the caller returns them)
            u = torch.bmm(h.unsqueeze(1), streams).squeeze(1)
        return current, u

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_current, grad_u):
        streams, y, H, h_post, h = ctx.saved_tensors
        need = ctx.needs_input_grad
        G, gu = grad_current, (grad_u if h is not None else None)
        g_streams = g_y = g_H = g_h_post = g_h = None
        if need[0]:
            if G is None:
                g_streams = torch.zeros_like(streams)
            else:
                g_streams = torch.bmm(H.transpose(1, 2), G) if H is not None else G.clone()
            if gu is not None:
                a = torch.bmm(h.unsqueeze(1), H).squeeze(1) if H is not None else h
                g_streams.addcmul_(a.unsqueeze(-1), gu.unsqueeze(1))
        if y is not None and need[1]:
            g_y = torch.bmm(h_post.unsqueeze(1), G).squeeze(1) if G is not None else torch.zeros_like(y)
            if gu is not None:
                g_y.addcmul_((h * h_post).sum(1, keepdim=True), gu)
        # the reductions over the features, in float64 from float32 chunks
        dots_G = None if G is None or H is None else stream_dots(G, streams)  # [B, n, n]: <G_i, X_j>
        dots_Gy = None if G is None or y is None else stream_dots(G, _as_rows(y)).squeeze(2)  # [B, n]
        dots_u = None if gu is None else stream_dots(_as_rows(gu), streams).squeeze(1)  # [B, n]: <g_u, X_j>
        dots_uy = None if gu is None or y is None else stream_dots(_as_rows(gu), _as_rows(y))[:, 0]  # [B, 1]
        if H is not None and need[2]:
            g_H = dots_G if dots_G is not None else torch.zeros(H.shape, dtype=torch.float64, device=H.device)
            if dots_u is not None:
                g_H = g_H + h.double().unsqueeze(-1) * dots_u.unsqueeze(1)
            g_H = g_H.to(H.dtype)
        if h_post is not None and need[3]:
            if y is None:
                g_h_post = torch.zeros_like(h_post)  # h_post scales y, which was None
            else:
                g_h_post = dots_Gy if dots_Gy is not None else torch.zeros(h_post.shape, dtype=torch.float64,
                                                                            device=h_post.device)
                if dots_uy is not None:
                    g_h_post = g_h_post + h.double() * dots_uy
                g_h_post = g_h_post.to(h_post.dtype)
        if h is not None and need[4]:
            if gu is None:
                g_h = torch.zeros_like(h)
            else:
                g_h = dots_u if H is None else torch.bmm(H.double(), dots_u.unsqueeze(-1)).squeeze(-1)
                if dots_uy is not None:
                    g_h = g_h + h_post.double() * dots_uy
                g_h = g_h.to(h.dtype)
        return g_streams, g_y, g_H, g_h_post, g_h, None


def combine_streams_torch(streams: Tensor, y: Tensor | None, H: Tensor | None, h_post: Tensor | None,
                          h: Tensor | None, need_current: bool = True) -> tuple[Tensor | None, Tensor | None]:
    """The map in PyTorch ops, differentiable, with accurate reductions in the backward
    (:class:`_CombineStreamsTorch`)."""
    if H is None and y is not None:
        raise ValueError("combine_streams: y without H (a pending update needs its mixing matrix)")
    if H is None and h is None:
        return (streams if need_current else None), None
    current, u = _CombineStreamsTorch.apply(streams, y, H, h_post, h, need_current and H is not None)
    if H is None and need_current:
        current = streams  # the map is the identity: the caller's tensor, with its autograd history
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

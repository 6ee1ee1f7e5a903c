"""An AOT sub-layer's work before its branch as one autograd node on CPU (float32).

From the state after the previous sub-layer (``streams [B, n, F]`` with the update ``y, H_prev,
h_post_prev`` pending and ``pooled``, the spatial mean of ``streams``) it computes, in three C
kernels: the spatial mean of the updated streams (carried by linearity), this sub-layer's
coefficients from it, and, in one pass over the streams, the updated streams and the branch input.
The backward runs the same kernels' backward passes in reverse. This is exactly the composition of
:func:`carry_pooled`, :func:`coefficients_cpu` and :func:`combine_streams` (tested against it);
fusing them removes two autograd nodes and a few dozen small operations per sub-layer.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import cpu_kernels

__all__ = ["fused_sublayer"]


_ptr, _check = cpu_kernels.ptr, cpu_kernels.check_status


class _SubLayerCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, streams, y, H_prev, h_post_prev, pooled, phi_pre, phi_post, phi_res, b_pre, b_post, b_res,
                alpha_pre, alpha_post, alpha_res, eps, iters, kernels):
        params = [t.contiguous() for t in (phi_pre, phi_post, phi_res, b_pre, b_post, b_res, alpha_pre, alpha_post,
                                           alpha_res)]
        streams, pooled = streams.contiguous(), pooled.contiguous()
        pending = y is not None
        if pending:
            y, H_prev, h_post_prev = y.contiguous(), H_prev.contiguous(), h_post_prev.contiguous()
        b, n, f = streams.shape
        d = pooled.shape[2]
        new = streams.new_empty
        threads = torch.get_num_threads()
        if pending:  # the mean of the updated streams
            y_mean, current_pooled = new(b, d), new(b, n, d)
            _check(kernels.carry.forward(b, n, f // d, d, y.data_ptr(), H_prev.data_ptr(), h_post_prev.data_ptr(),
                                         pooled.data_ptr(), y_mean.data_ptr(), current_pooled.data_ptr()), "carry")
        else:
            y_mean, current_pooled = None, pooled
        # h_pre, h_post, H_res, then what the coefficients' backward needs
        coef = [new(b, n), new(b, n), new(b, n, n), new(b, n * d), new(b), new(b, 2 * n + n * n), new(b, 2 * iters, n, n)]
        kernels.coefficients.forward(b, n, n * d, iters, eps, current_pooled.data_ptr(), *[t.data_ptr() for t in params],
                                     *[t.data_ptr() for t in coef])
        pooled_empty = cpu_kernels.pooled_empty
        current = pooled_empty(streams, b, n, f) if pending else None
        u = pooled_empty(streams, b, f)
        _check(kernels.streams.forward(b, n, f, streams.data_ptr(), _ptr(y), _ptr(H_prev), _ptr(h_post_prev),
                                       coef[0].data_ptr(), _ptr(current), u.data_ptr(), threads), "stream")
        ctx.save_for_backward(streams, y, H_prev, h_post_prev, pooled, y_mean, current_pooled, *params, *coef)
        ctx.kernels, ctx.dims = kernels, (b, n, f, d, iters)
        return current, u, coef[1], coef[2], (current_pooled if pending else None)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_current, grad_u, grad_h_post, grad_H, grad_pooled_out):
        saved = ctx.saved_tensors
        streams, y, H_prev, h_post_prev, pooled, y_mean, current_pooled = saved[:7]
        params, coef = saved[7:16], saved[16:]
        kernels, (b, n, f, d, iters) = ctx.kernels, ctx.dims
        need = ctx.needs_input_grad
        pending = y is not None
        new = streams.new_empty
        threads = torch.get_num_threads()
        # contiguous copies stay referenced until the kernels return
        grad_current, grad_u, grad_h_post, grad_H = (None if g is None else g.contiguous()
                                                     for g in (grad_current, grad_u, grad_h_post, grad_H))
        # 1. the stream pass: streams, y, the pending update, and h_pre
        g_streams = cpu_kernels.pooled_empty(streams, b, n, f) if need[0] else None
        g_y = cpu_kernels.pooled_empty(streams, b, f) if pending else None
        g_H_prev = new(b, n, n) if pending else None
        g_h_post_prev = new(b, n) if pending else None
        g_h_pre = new(b, n)
        _check(kernels.streams.backward(b, n, f, streams.data_ptr(), _ptr(y), _ptr(H_prev), _ptr(h_post_prev),
                                        coef[0].data_ptr(), _ptr(grad_current), _ptr(grad_u), _ptr(g_streams),
                                        _ptr(g_y), _ptr(g_H_prev), _ptr(g_h_post_prev), g_h_pre.data_ptr(), threads),
               "stream")
        # 2. the coefficients: the pooled summary and the parameters
        g_current_pooled = new(b, n, d)
        g_params = [torch.empty_like(t) for t in params]
        phi_pre, phi_post, phi_res, b_pre, _, _, alpha_pre, alpha_post, alpha_res = params
        h_pre, h_post, _, z, rinv, proj, iterates = coef
        _check(kernels.coefficients.backward(
            b, n, n * d, iters, phi_pre.data_ptr(), phi_post.data_ptr(), phi_res.data_ptr(), b_pre.data_ptr(),
            alpha_pre.data_ptr(), alpha_post.data_ptr(), alpha_res.data_ptr(), h_pre.data_ptr(), h_post.data_ptr(),
            z.data_ptr(), rinv.data_ptr(), proj.data_ptr(), iterates.data_ptr(), g_h_pre.data_ptr(),
            _ptr(grad_h_post), _ptr(grad_H), g_current_pooled.data_ptr(), *[g.data_ptr() for g in g_params]),
            "coefficient")
        if grad_pooled_out is not None:
            g_current_pooled += grad_pooled_out
        # 3. the carried summary: back to the old summary, the pending update and y
        if pending:
            g_pooled = new(b, n, d)
            _check(kernels.carry.backward(b, n, f // d, d, H_prev.data_ptr(), h_post_prev.data_ptr(), pooled.data_ptr(),
                                          y_mean.data_ptr(), g_current_pooled.data_ptr(), g_H_prev.data_ptr(),
                                          g_h_post_prev.data_ptr(), g_pooled.data_ptr(), g_y.data_ptr()), "carry")
        else:
            g_pooled = g_current_pooled
        return (g_streams, g_y, g_H_prev, g_h_post_prev, g_pooled, *g_params, None, None, None)


def fused_sublayer(streams: Tensor, y: Tensor | None, H_prev: Tensor | None, h_post_prev: Tensor | None,
                   pooled: Tensor, params, eps: float, iters: int):
    """``(current [B, n, F], u [B, F], h_post [B, n], H_res [B, n, n], current_pooled [B, n, D])`` or
    None when the fused kernels do not apply (then the caller composes the separate operations).

    ``current`` is ``streams`` and ``current_pooled`` is ``pooled`` when no update is pending."""
    kernels = cpu_kernels.sublayer_kernels(streams, (y, H_prev, h_post_prev, pooled, *params))
    if kernels is None:
        return None
    current, u, h_post, H, current_pooled = _SubLayerCPU.apply(
        streams, y, H_prev, h_post_prev, pooled, *params, float(eps), int(iters), kernels)
    if y is None:
        current, current_pooled = streams, pooled
    return current, u, h_post, H, current_pooled

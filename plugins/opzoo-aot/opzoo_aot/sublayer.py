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
from .coefficients import run_coefficients, run_coefficients_backward
from .stream_ops import run_streams, run_streams_backward

__all__ = ["fused_sublayer"]


_check = cpu_kernels.check_status


class _SubLayerCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, streams, y, H_prev, h_post_prev, pooled, phi_pre, phi_post, phi_res, b_pre, b_post, b_res,
                alpha_pre, alpha_post, alpha_res, eps, iters, kernels):
        params = [t.contiguous() for t in (phi_pre, phi_post, phi_res, b_pre, b_post, b_res, alpha_pre, alpha_post,
                                           alpha_res)]
        streams, y, H_prev, h_post_prev, pooled = (None if t is None else t.contiguous()
                                                   for t in (streams, y, H_prev, h_post_prev, pooled))
        pending = y is not None
        b, n, f = streams.shape
        d = pooled.shape[2]
        if pending:  # the mean of the updated streams
            y_mean, current_pooled = pooled.new_empty(b, d), pooled.new_empty(b, n, d)
            _check(kernels.carry.forward(b, n, f // d, d, y.data_ptr(), H_prev.data_ptr(), h_post_prev.data_ptr(),
                                         pooled.data_ptr(), y_mean.data_ptr(), current_pooled.data_ptr()), "carry")
        else:
            y_mean, current_pooled = None, pooled
        coef = run_coefficients(kernels.coefficients, current_pooled, params, eps, iters)
        current, u = run_streams(kernels.streams, streams, y, H_prev, h_post_prev, coef[0], need_current=True)
        ctx.save_for_backward(streams, y, H_prev, h_post_prev, pooled, y_mean, *params, *coef)
        ctx.kernels = kernels
        return current, u, coef[1], coef[2], (current_pooled if pending else None)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_current, grad_u, grad_h_post, grad_H, grad_pooled_out):
        saved = ctx.saved_tensors
        streams, y, H_prev, h_post_prev, pooled, y_mean = saved[:6]
        params, coef = saved[6:15], saved[15:]
        kernels, pending = ctx.kernels, y is not None
        # 1. the stream pass: streams, y, the pending update, and h_pre
        need = (ctx.needs_input_grad[0], pending, pending, pending, True)
        g_streams, g_y, g_H_prev, g_h_post_prev, g_h_pre = run_streams_backward(
            kernels.streams, streams, y, H_prev, h_post_prev, coef[0], grad_current, grad_u, need)
        # 2. the coefficients: the current summary and the parameters
        g_current_pooled, *g_params = run_coefficients_backward(kernels.coefficients, params, coef, g_h_pre,
                                                                grad_h_post, grad_H)
        if grad_pooled_out is not None:
            g_current_pooled += grad_pooled_out
        # 3. the carried summary: back to the old summary, the pending update and y
        if pending:
            b, n, f = streams.shape
            d = pooled.shape[2]
            g_pooled = pooled.new_empty(b, n, d)
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

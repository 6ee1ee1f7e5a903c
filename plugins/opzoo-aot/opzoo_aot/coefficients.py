"""An AOT sub-layer's coefficients ``h_pre, h_post, H_res`` from its pooled streams (DESIGN §6.3).

``pooled [B, n, D]`` (float32) and the sub-layer's parameters give::

    z      = RMSNorm(flatten(pooled))                      # [B, nD], no affine weight
    h_pre  = σ(α_pre · z φ_pre + b_pre) / Σ_i σ(...)_i      # [B, n], on the simplex
    h_post = 2 σ(α_post · z φ_post + b_post)                # [B, n]
    H_res  = SinkhornKnopp(exp(α_res · mat(z φ_res) + b_res), iters)   # [B, n, n]

Four implementations of the same equations: a C kernel with a hand-written backward on CPU (the
whole path is a few hundred tiny operations, whose dispatch cost dominated in PyTorch); PyTorch
ops with a hand-written backward (:func:`coefficients_torch`, the eager path elsewhere: one
autograd node instead of ~30); the PyTorch ops differentiated by autograd
(:func:`stream_coefficients`, the reference); and those fused by ``torch.compile`` (the CUDA
default).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import cpu_kernels
from .sinkhorn import _sinkhorn_iterates, sinkhorn_knopp_eager, sinkhorn_vjp

__all__ = ["stream_coefficients", "coefficients_torch", "compiled_coefficients", "coefficients_cpu"]


def stream_coefficients(
    pooled: Tensor, phi_pre: Tensor, phi_post: Tensor, phi_res: Tensor, b_pre: Tensor, b_post: Tensor,
    b_res: Tensor, alpha_pre: Tensor, alpha_post: Tensor, alpha_res: Tensor, eps: float, iters: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """The equations in PyTorch ops: ``pooled [B, n, D] -> h_pre [B, n], h_post [B, n], H_res [B, n, n]``."""
    n = pooled.shape[1]
    z = F.rms_norm(pooled.flatten(1), (pooled.shape[1] * pooled.shape[2],), eps=eps)  # [B, nD], no affine
    proj = z @ torch.cat([phi_pre, phi_post, phi_res], dim=1)  # [B, 2n + n²]
    gate = torch.sigmoid(alpha_pre * proj[:, :n] + b_pre)
    h_pre = gate / gate.sum(dim=1, keepdim=True)  # on the simplex
    h_post = 2.0 * torch.sigmoid(alpha_post * proj[:, n:2 * n] + b_post)
    H_res = sinkhorn_knopp_eager(alpha_res * proj[:, 2 * n:].unflatten(1, (n, n)) + b_res, iters)
    return h_pre, h_post, H_res


class _CoefficientsTorch(torch.autograd.Function):
    """:func:`stream_coefficients` as one autograd node: the forward in PyTorch ops, the backward
    written out (the same vector-Jacobian products the C kernel computes)::

        g_σpre = (g_hpre - Σ g_hpre·h_pre) / Σσ_pre        g_apre = g_σpre σ_pre (1 - σ_pre)
        g_apost = 2 g_hpost σ_post (1 - σ_post)             g_logits = Sinkhorn VJP of g_H
        g_proj = α · g_a     g_φ = z^T g_proj     g_z = g_proj φ^T     g_b = Σ_B g_a     g_α = Σ g_a proj
        g_x = r (g_z - z · mean(g_z z))                     (z = x r, r = 1/sqrt(mean(x²) + eps))
    """

    @staticmethod
    def forward(ctx, pooled, phi_pre, phi_post, phi_res, b_pre, b_post, b_res, alpha_pre, alpha_post,
                alpha_res, eps, iters):
        b, n, d = pooled.shape
        x = pooled.reshape(b, n * d)
        rinv = torch.rsqrt(x.square().mean(dim=1, keepdim=True) + eps)  # [B, 1]
        z = x * rinv
        phi = torch.cat([phi_pre, phi_post, phi_res], dim=1)
        proj = z @ phi  # [B, 2n + n²]
        sig_pre = torch.sigmoid(torch.addcmul(b_pre, alpha_pre, proj[:, :n]))
        sig_post = torch.sigmoid(torch.addcmul(b_post, alpha_post, proj[:, n:2 * n]))
        H, normalized = _sinkhorn_iterates(torch.addcmul(b_res, alpha_res, proj[:, 2 * n:].view(b, n, n)), iters)
        ctx.save_for_backward(z, rinv, phi, proj, sig_pre, sig_post, normalized, alpha_pre, alpha_post, alpha_res)
        return sig_pre / sig_pre.sum(dim=1, keepdim=True), 2.0 * sig_post, H

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_pre, grad_h_post, grad_H):
        z, rinv, phi, proj, sig_pre, sig_post, normalized, alpha_pre, alpha_post, alpha_res = ctx.saved_tensors
        b, n = sig_pre.shape
        total = sig_pre.sum(dim=1, keepdim=True)
        g_sig_pre = (grad_h_pre - (grad_h_pre * sig_pre).sum(dim=1, keepdim=True) / total) / total
        g_pre = g_sig_pre * sig_pre * (1.0 - sig_pre)
        g_post = 2.0 * grad_h_post * sig_post * (1.0 - sig_post)
        g_logits = sinkhorn_vjp(normalized, grad_H).reshape(b, n * n)
        g_act = torch.cat([g_pre, g_post, g_logits], dim=1)  # [B, 2n + n²]: of alpha·proj + b
        g_bias = g_act.sum(dim=0)
        g_alpha = (g_act * proj).sum(dim=0)
        alphas = torch.cat([alpha_pre.expand(n), alpha_post.expand(n), alpha_res.expand(n * n)])
        g_proj = g_act * alphas
        g_phi = z.T @ g_proj  # [nD, 2n + n²]
        g_z = g_proj @ phi.T  # [B, nD]
        g_x = rinv * (g_z - z * (g_z * z).mean(dim=1, keepdim=True))
        cols = (n, n, n * n)
        g_phi_pre, g_phi_post, g_phi_res = g_phi.split(cols, dim=1)
        g_b_pre, g_b_post, g_b_res = g_bias.split(cols)
        g_a_pre, g_a_post, g_a_res = (g.sum().reshape(1) for g in g_alpha.split(cols))
        return (g_x.view(b, n, -1), g_phi_pre, g_phi_post, g_phi_res, g_b_pre, g_b_post, g_b_res.view(n, n),
                g_a_pre, g_a_post, g_a_res, None, None)


def coefficients_torch(pooled: Tensor, *params: Tensor, eps: float, iters: int) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`stream_coefficients` with a hand-written backward (:class:`_CoefficientsTorch`): the
    eager PyTorch path (CUDA without compile, bf16, CPUs without a C compiler). Under
    ``torch.compile`` the plain ops, which inductor fuses and differentiates itself."""
    if torch.compiler.is_compiling():
        return stream_coefficients(pooled, *params, eps, iters)
    return _CoefficientsTorch.apply(pooled, *params, float(eps), int(iters))


@functools.lru_cache(maxsize=None)
def compiled_coefficients():
    """:func:`stream_coefficients` fused by torch.compile (the CUDA default): a handful of kernels
    instead of ~100 tiny launches for the projections and the 20 Sinkhorn iterations."""
    return torch.compile(stream_coefficients, fullgraph=True, dynamic=True)


def run_coefficients(kernel, pooled: Tensor, params: list[Tensor], eps: float, iters: int) -> list[Tensor]:
    """``aot_coefficients_forward`` on contiguous inputs: ``[h_pre, h_post, H_res]`` followed by what
    the backward needs (``z``, ``1/rms``, the projections and the Sinkhorn iterates)."""
    b, n, d = pooled.shape
    new = pooled.new_empty
    out = [new(b, n), new(b, n), new(b, n, n), new(b, n * d), new(b), new(b, 2 * n + n * n), new(b, 2 * iters, n, n)]
    kernel.forward(b, n, n * d, iters, eps, pooled.data_ptr(), *[t.data_ptr() for t in params],
                   *[t.data_ptr() for t in out])
    return out


def run_coefficients_backward(kernel, params: list[Tensor], saved: list[Tensor], grad_h_pre: Tensor | None,
                              grad_h_post: Tensor | None, grad_H: Tensor | None) -> list[Tensor]:
    """``aot_coefficients_backward``: ``[grad_pooled, *grad_params]`` from :func:`run_coefficients`'s output."""
    h_pre, h_post, _, z, rinv, proj, iterates = saved
    b, n = h_pre.shape
    d, iters = z.shape[1] // n, iterates.shape[1] // 2
    grads = [z.new_empty(b, n, d)] + [torch.empty_like(t) for t in params]
    # contiguous copies stay referenced until the kernel returns (a pointer does not keep them alive)
    incoming = [None if g is None else g.contiguous() for g in (grad_h_pre, grad_h_post, grad_H)]
    phi_pre, phi_post, phi_res, b_pre, _, _, alpha_pre, alpha_post, alpha_res = params
    status = kernel.backward(
        b, n, n * d, iters, *[t.data_ptr() for t in (phi_pre, phi_post, phi_res, b_pre, alpha_pre, alpha_post, alpha_res)],
        *[t.data_ptr() for t in (h_pre, h_post, z, rinv, proj, iterates)], *map(cpu_kernels.ptr, incoming),
        *[g.data_ptr() for g in grads],
    )
    cpu_kernels.check_status(status, "coefficient")
    return grads


class _CoefficientsCPU(torch.autograd.Function):
    """The equations through ``aot_coefficients_forward/backward`` (csrc/aot_kernels_impl.h)."""

    @staticmethod
    def forward(ctx, pooled, phi_pre, phi_post, phi_res, b_pre, b_post, b_res, alpha_pre, alpha_post,
                alpha_res, eps, iters, kernel):
        params = [t.contiguous() for t in (phi_pre, phi_post, phi_res, b_pre, b_post, b_res, alpha_pre,
                                           alpha_post, alpha_res)]
        out = run_coefficients(kernel, pooled.contiguous(), params, eps, iters)
        ctx.save_for_backward(*params, *out)
        ctx.kernel = kernel
        return out[0], out[1], out[2]

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h_pre, grad_h_post, grad_H):
        saved = ctx.saved_tensors
        grads = run_coefficients_backward(ctx.kernel, saved[:9], saved[9:], grad_h_pre, grad_h_post, grad_H)
        return (*grads, None, None, None)


def coefficients_cpu(pooled: Tensor, *params: Tensor, eps: float, iters: int) -> tuple[Tensor, Tensor, Tensor] | None:
    """The C kernel's result, or None when it does not apply (not CPU, mixed dtypes, no compiler)."""
    kernel = cpu_kernels.coefficient_kernel(pooled, params)
    if kernel is None:
        return None
    return _CoefficientsCPU.apply(pooled, *params, float(eps), int(iters), kernel)

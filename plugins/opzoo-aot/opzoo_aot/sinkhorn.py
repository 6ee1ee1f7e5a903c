"""Sinkhorn–Knopp projection of ``exp(logits)`` onto (approximately) doubly stochastic matrices.

DESIGN §6.3: ``H = SinkhornKnopp(exp(H̃), iters)`` normalizes columns, then rows, ``iters`` times,
so rows sum to 1 exactly (up to rounding) and columns approximately. It iterates in log
space, ``log M -= logsumexp`` over columns, then over rows (one ``log_softmax`` per half-step;
in float64 on CPU), the same recursion, which cannot divide by an underflowed zero for any finite
input; every entry stays finite and the result ``exp(log M)`` is non-negative. The result is
always float32 (at least), also under autocast.

All matrices of a sub-layer (``[..., n, n]``, one per sample) go through one call. On CUDA the
20 iterations of tiny kernels are fused by ``torch.compile`` (``compile="auto"``); on CPU the AOT
residual runs the same recursion inside its C coefficient kernel (``csrc/aot_kernels_impl.h``), and
this module's eager loop is the reference it is tested against.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Literal, Union

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["autocast_off", "sinkhorn_knopp", "sinkhorn_knopp_eager", "compiled_sinkhorn", "CompileMode", "use_compiled"]

CompileMode = Union[bool, Literal["auto"]]
ENV_COMPILE = "OPZOO_AOT_COMPILE"  # "0" turns the compiled path off everywhere, "1" forces it


def autocast_off(device: torch.device):
    """A context that disables autocast on ``device`` (a no-op where autocast does not exist)."""
    if torch.amp.is_autocast_available(device.type) and torch.is_autocast_enabled(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def _sinkhorn_log_loop(log_m: Tensor, iters: int) -> Tensor:
    """The log-space recursion, differentiable by autograd (the form torch.compile traces)."""
    log_m = log_m - log_m.amax(dim=(-2, -1), keepdim=True)
    for _ in range(iters):
        log_m = log_m - torch.logsumexp(log_m, dim=-2, keepdim=True)  # columns sum to 1
        log_m = log_m - torch.logsumexp(log_m, dim=-1, keepdim=True)  # rows sum to 1
    return log_m.exp()


def _iteration_dtype(logits: Tensor) -> torch.dtype:
    """float64 on CPU (the matrices are tiny, and float64 is what the C kernels iterate in), else
    the logits' dtype (at least float32; some accelerators have no float64)."""
    return torch.float64 if logits.device.type == "cpu" else logits.dtype


def _sinkhorn_iterates(logits: Tensor, iters: int) -> tuple[Tensor, Tensor]:
    """``(H [..., n, n] in logits' dtype, the normalized matrix after every half-step [2·iters, ..., n, n])``.

    Each half-step is one ``log_softmax`` (``L - logsumexp(L)`` over columns, then over rows): a
    single small kernel, stable for any finite input, with no shift or underflow check needed."""
    log_m = logits.to(_iteration_dtype(logits))
    iterates = []
    for _ in range(iters):
        log_m = log_m.log_softmax(dim=-2)  # columns sum to 1
        iterates.append(log_m)
        log_m = log_m.log_softmax(dim=-1)  # rows sum to 1
        iterates.append(log_m)
    normalized = torch.stack(iterates).exp()
    return normalized[-1].to(logits.dtype), normalized


class _SinkhornLog(torch.autograd.Function):
    """The same recursion with a hand-written backward.

    Each half-step ``L' = L - logsumexp(L, dim)`` has the vector-Jacobian product
    ``g -> g - S · Σ_dim g`` with ``S = exp(L')`` (the normalized matrix), so the backward needs only
    the 2·iters normalized matrices, not autograd's graph of ~10 tiny nodes per half-step, which
    dominated the AOT residual's cost on CPU.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, iters: int) -> Tensor:
        out, normalized = _sinkhorn_iterates(logits, iters)
        ctx.save_for_backward(normalized)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        (normalized,) = ctx.saved_tensors
        return sinkhorn_vjp(normalized, grad_out), None


def sinkhorn_vjp(normalized: Tensor, grad_out: Tensor) -> Tensor:
    """The gradient of the logits from the gradient of ``H`` and the normalized matrices of
    :func:`_sinkhorn_iterates` (``g -> g - S · Σ_dim g`` per half-step, last to first), in
    ``grad_out``'s dtype."""
    steps = normalized.unbind(0)  # once, rather than an indexing op per half-step
    grad = grad_out.to(normalized.dtype) * steps[-1]
    for k in range(len(steps) - 1, -1, -1):
        dim = -1 if k % 2 else -2
        grad = grad.addcmul(steps[k], grad.sum(dim=dim, keepdim=True), value=-1.0)
    return grad.to(grad_out.dtype)


def sinkhorn_knopp_eager(logits: Tensor, iters: int) -> Tensor:
    """``[..., n, n] -> [..., n, n]``: Sinkhorn–Knopp of ``exp(logits)``, columns then rows, in float32
    (float64 for float64 logits: never below float32)."""
    log_m = logits if logits.dtype == torch.float64 else logits.float()
    if torch.compiler.is_compiling():
        return _sinkhorn_log_loop(log_m, iters)
    if not (torch.is_grad_enabled() and log_m.requires_grad):
        return _sinkhorn_iterates(log_m, iters)[0]
    return _SinkhornLog.apply(log_m, iters)


@functools.lru_cache(maxsize=None)
def compiled_sinkhorn(iters: int):
    """``sinkhorn_knopp_eager`` with ``iters`` fixed, compiled into one fused graph (built lazily)."""

    def run(logits: Tensor) -> Tensor:
        return sinkhorn_knopp_eager(logits, iters)

    return torch.compile(run, fullgraph=True, dynamic=True)


def use_compiled(mode: CompileMode, device: torch.device) -> bool:
    """Whether ``mode`` selects the compiled path on ``device`` (``auto``: CUDA only)."""
    env = os.environ.get(ENV_COMPILE, "").strip()
    if env == "0":
        return False
    if env == "1":
        return True
    if mode == "auto":
        return device.type == "cuda"
    return bool(mode)


def sinkhorn_knopp(logits: Tensor, iters: int = 20, compile: CompileMode = "auto") -> Tensor:
    """``[..., n, n] -> [..., n, n]`` float32 (float64 for float64 logits) doubly stochastic (rows
    exact), stable for any finite input.

    Runs outside autocast, so bf16/fp16 autocast regions still get a float32 projection.
    """
    if logits.ndim < 2 or logits.shape[-1] != logits.shape[-2]:
        raise ValueError(f"sinkhorn_knopp expects square matrices [..., n, n], got shape {list(logits.shape)}")
    if iters < 1:
        raise ValueError(f"sinkhorn_knopp needs iters >= 1, got {iters}")
    with autocast_off(logits.device):
        if use_compiled(compile, logits.device) and not torch.compiler.is_compiling():
            return compiled_sinkhorn(iters)(logits if logits.dtype == torch.float64 else logits.float())
        return sinkhorn_knopp_eager(logits, iters)

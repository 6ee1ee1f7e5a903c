"""DPOT's time aggregation of the per-step latents, and its fold into the patch embedding."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


class TimeAggregator(nn.Module):
    """DPOT's time aggregation: ``[..., T, D] -> [..., D]``.

    ``exp_mlp``: ``out[..., j] = sum_t sum_i w[t, i, j] * x[..., t, i] * cos(t_lin @ gamma)[t, i]``
    with ``t_lin = linspace(0, 1, T)``; ``mlp``: the same without the cosine factor.
    """

    def __init__(self, timesteps: int, dim: int, kind: str = "exp_mlp"):
        super().__init__()
        self.kind = kind
        self.w = nn.Parameter(torch.randn(timesteps, dim, dim) / (timesteps * dim**0.5))
        if kind == "exp_mlp":
            self.gamma = nn.Parameter(2 ** torch.linspace(-10, 10, dim).unsqueeze(0))

    def time_embedding(self, timesteps: int, device, dtype) -> Tensor:
        """``cos(t @ gamma)``: ``[T, D]``."""
        t = torch.linspace(0, 1, timesteps, device=device, dtype=dtype).unsqueeze(-1)
        return torch.cos(t @ self.gamma.to(dtype))

    def cosine(self) -> Tensor:
        """The factor on each input (step, channel): ``cos(t_lin @ gamma)`` for ``exp_mlp``, ones for
        ``mlp``: ``[T, D]``."""
        t = self.w.shape[0]
        if self.kind != "exp_mlp":
            return self.w.new_ones(t, self.w.shape[1])
        return self.time_embedding(t, self.w.device, self.w.dtype)

    def forward(self, x: Tensor) -> Tensor:
        t, d = x.shape[-2:]
        if t != self.w.shape[0]:
            raise ValueError(f"time aggregation was built for {self.w.shape[0]} input steps, got {t}")
        if self.kind == "exp_mlp":
            x = x * self.time_embedding(t, x.device, x.dtype)
        return x.flatten(-2) @ self.w.reshape(t * d, d)


class _FoldTimeWeights(torch.autograd.Function):
    """:func:`fold_time_weights` with a backward that writes the ``[T, D, D]`` gradient of ``w`` once.

    Autograd of the same expressions makes two ``w``-sized gradients and sums them (and ``w * c``
    materializes a third ``w``-sized tensor): at D = 1024 each is 40 MiB of fresh pages per step.
    """

    @staticmethod
    def forward(ctx, proj: Tensor, cos: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        scaled = proj.unsqueeze(0) * cos.unsqueeze(1)                     # [T, hidden, D]
        # per row i: cos[:, i] @ w[:, i, :], one strided bmm that reads w once
        summed = torch.bmm(cos.t().unsqueeze(1), w.transpose(0, 1)).squeeze(1)
        ctx.save_for_backward(proj, cos, w, scaled)
        return torch.bmm(scaled, w), summed

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_mixed: Tensor | None, grad_summed: Tensor | None):
        proj, cos, w, scaled = ctx.saved_tensors
        # under autocast the forward's products were bf16/fp16; the backward runs in the weights' dtype
        grad_mixed, grad_summed = (None if g is None else g.to(w.dtype) for g in (grad_mixed, grad_summed))
        grad_scaled = grad_w = grad_cos = None
        if grad_summed is not None:
            # d summed[i, j] / d w[t, i, j] = c[t, i]; d / d c[t, i] = sum_j g[i, j] w[t, i, j]
            grad_w = cos.unsqueeze(-1) * grad_summed
            grad_cos = torch.stack([(w_t * grad_summed).sum(-1) for w_t in w])
        if grad_mixed is not None:
            grad_scaled = torch.bmm(grad_mixed, w.transpose(1, 2))           # [T, hidden, D]
            if grad_w is None:
                grad_w = torch.bmm(scaled.transpose(1, 2), grad_mixed)
            else:
                grad_w.baddbmm_(scaled.transpose(1, 2), grad_mixed)
        grad_proj = None
        if grad_scaled is not None:
            grad_proj = (grad_scaled * cos.unsqueeze(1)).sum(0)
            from_scaled = (grad_scaled * proj.unsqueeze(0)).sum(1)
            grad_cos = from_scaled if grad_cos is None else grad_cos + from_scaled
        if grad_cos is None:
            grad_cos = torch.zeros_like(cos)
        return grad_proj, grad_cos, grad_w


def fold_time_weights(proj: Tensor, cos: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """The time aggregation folded into the patch embedding's 1x1 conv (``PotBackbone.embed_aggregated``).

    ``proj [hidden, D]`` (``W2^T``), ``cos [T, D]``, ``w [T, D, D]`` -> ``mixed [T, hidden, D]``
    with ``mixed[t] = proj diag(cos[t]) w[t]``, and ``summed [D, D] = sum_t diag(cos[t]) w[t]``.
    """
    if torch.compiler.is_compiling():  # the same expressions, for the compiler to fuse
        return torch.bmm(proj.unsqueeze(0) * cos.unsqueeze(1), w), (w * cos.unsqueeze(-1)).sum(0)
    return _FoldTimeWeights.apply(proj, cos, w)


__all__ = ["TimeAggregator", "fold_time_weights"]

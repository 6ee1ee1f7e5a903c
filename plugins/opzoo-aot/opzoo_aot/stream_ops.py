"""The three stream operations of an AOT sub-layer, with backward passes written as batched matmuls.

Autograd's generic formulas for these broadcasting products make several full-size temporaries
(``G * h_post`` then a sum, an outer product through a k=1 matmul, a materialized mean gradient);
here every gradient is one ``bmm`` or one broadcast, which matters because the stream state is n
times the size of a plain residual's latent. Shapes: ``streams [B, n, F]`` with ``F = S·D``.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["pool_streams", "aggregate_streams", "mix_streams"]


class _PoolStreams(torch.autograd.Function):
    """``streams [B, n, S·D] -> mean over S [B, n, D]`` in float32."""

    @staticmethod
    def forward(ctx, streams: Tensor, dim: int) -> Tensor:
        b, n, f = streams.shape
        ctx.shape, ctx.dtype = (b, n, f // dim, dim), streams.dtype
        return streams.view(ctx.shape).mean(dim=2, dtype=torch.float32)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        b, n, s, d = ctx.shape
        # contiguous like the aggregate and mix gradients of the same [B, n, S·D] tensor, so autograd
        # accumulates the three in place in one buffer
        return (grad / s).to(ctx.dtype).unsqueeze(2).expand(b, n, s, d).reshape(b, n, s * d), None


class _AggregateStreams(torch.autograd.Function):
    """``u[b] = Σ_i h_pre[b, i] · streams[b, i]``: ``[B, n, F], [B, n] -> [B, F]``."""

    @staticmethod
    def forward(ctx, streams: Tensor, h_pre: Tensor) -> Tensor:
        ctx.save_for_backward(streams, h_pre)
        return torch.bmm(h_pre.unsqueeze(1), streams).squeeze(1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_u: Tensor):
        streams, h_pre = ctx.saved_tensors
        grad_u = grad_u.contiguous()
        grad_streams = grad_h_pre = None
        if ctx.needs_input_grad[0]:
            grad_streams = h_pre.unsqueeze(-1) * grad_u.unsqueeze(1)
        if ctx.needs_input_grad[1]:
            grad_h_pre = torch.bmm(streams, grad_u.unsqueeze(-1)).squeeze(-1)
        return grad_streams, grad_h_pre


class _MixStreams(torch.autograd.Function):
    """``out = H @ streams + h_post ⊗ y``: ``[B, n, F], [B, n, n], [B, n], [B, F] -> [B, n, F]``."""

    @staticmethod
    def forward(ctx, streams: Tensor, H: Tensor, h_post: Tensor, y: Tensor) -> Tensor:
        ctx.save_for_backward(streams, H, h_post, y)
        out = torch.bmm(H, streams)
        return out.addcmul_(h_post.unsqueeze(-1), y.unsqueeze(1))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        streams, H, h_post, y = ctx.saved_tensors
        grad = grad.contiguous()
        need = ctx.needs_input_grad
        grad_streams = torch.bmm(H.transpose(1, 2), grad) if need[0] else None
        grad_H = torch.bmm(grad, streams.transpose(1, 2)) if need[1] else None
        grad_h_post = torch.bmm(grad, y.unsqueeze(-1)).squeeze(-1) if need[2] else None
        grad_y = torch.bmm(h_post.unsqueeze(1), grad).squeeze(1) if need[3] else None
        return grad_streams, grad_H, grad_h_post, grad_y


def pool_streams(streams: Tensor, dim: int) -> Tensor:
    """``[B, n, S·D] -> [B, n, D]``: float32 mean over the spatial positions of width ``dim``."""
    return _PoolStreams.apply(streams, dim)


def aggregate_streams(streams: Tensor, h_pre: Tensor) -> Tensor:
    """``[B, n, F], [B, n] -> [B, F]``: the sub-layer input ``Σ_i h_pre[i] X_i``."""
    return _AggregateStreams.apply(streams, h_pre)


def mix_streams(streams: Tensor, H: Tensor, h_post: Tensor, y: Tensor) -> Tensor:
    """``[B, n, F], [B, n, n], [B, n], [B, F] -> [B, n, F]``: ``X'_i = Σ_j H_ij X_j + h_post_i · y``."""
    return _MixStreams.apply(streams, H, h_post, y)

"""Walrus's processor blocks (docs/models.md section 13, step 5): the RMS "group" norm, causal attention over time with
a T5 relative bias, full attention over a frame's tokens with lucidrains' axial rotary embedding fused with a SwiGLU MLP,
as the published module tree names them (PolymathicAI/walrus ``walrus/models/spatial_blocks/full_attention.py`` @
79631b8; the fork walrus_steering @ e963fad for the rest: tests/walrus/test_parity.py).

``SpaceTimeSplitBlock([T, B, hidden, H, W, D]) -> same``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NORM_EPS = 1e-6  # RMSGroupNorm's stored (and printed) eps, which its forward never uses


class RMSGroupNorm(nn.Module):
    """``[N, C, *S]``: each channel divided by its RMS over the grid, then scaled; no centring, no bias. Despite its
    name (and its ``groups``, which only reshape), upstream's ``F.rms_norm`` runs over the grid axes alone, with the
    dtype's epsilon (``eps`` is stored, printed, and never passed on)."""

    def __init__(self, groups: int, channels: int, eps: float = NORM_EPS):
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:
        y = F.rms_norm(x, x.shape[2:])
        return y * self.weight.reshape(1, -1, *([1] * (x.ndim - 2)))

    def extra_repr(self) -> str:
        return f"{self.groups}, {self.weight.numel()}, eps={self.eps}"


def drop_path(x: Tensor, p: float, training: bool) -> Tensor:
    """Stochastic depth over ``x``'s first axis (timm's ``DropPath``, as upstream)."""
    if p == 0.0 or not training:
        return x
    keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1.0 - p)
    return x * keep.div_(1.0 - p)


def pixel_positions(n: int, device=None) -> Tensor:
    """``linspace(-1, 1, n)`` in float32, as upstream's rotary embedding makes an axis's positions (torch's float32
    linspace may round a few of them otherwise on another CPU: its vectorized loop fuses the multiply-add)."""
    return torch.linspace(-1, 1, steps=n, device=device)


class AxialRotary(nn.Module):
    """lucidrains' rotary embedding as upstream's spatial attention uses it (``freqs_for="pixel"``,
    ``max_freq=256``): ``freqs`` = ``linspace(1, 128, dim/2) * pi`` (a buffer the checkpoint holds); each axis's
    positions ``linspace(-1, 1, n)``, in float32 as upstream makes them."""

    def __init__(self, dim: int, max_freq: float = 256.0):
        super().__init__()
        self.register_buffer("freqs", torch.linspace(1.0, max_freq / 2, dim // 2) * math.pi)

    def axial_angles(self, grid: Sequence[int]) -> Tensor:
        """``[H, W, D, 3 * dim]``: every axis's angles (each frequency twice, adjacent), axis after axis."""
        parts = []
        for axis, n in enumerate(grid):
            pos = pixel_positions(n, self.freqs.device).to(self.freqs.dtype)
            ang = (pos[:, None] * self.freqs).repeat_interleave(2, dim=-1)
            shape = [1, 1, 1, ang.shape[-1]]
            shape[axis] = n
            parts.append(ang.reshape(shape).expand(*grid, ang.shape[-1]))
        return torch.cat(parts, dim=-1)


def rotate(t: Tensor, angles: Tensor) -> Tensor:
    """``t[..., c]`` with its first ``angles.shape[-1]`` channels rotated in adjacent pairs (RoPE), the rest kept."""
    r = angles.shape[-1]
    mid = t[..., :r]
    pairs = mid.unflatten(-1, (-1, 2))
    half = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return torch.cat((mid * angles.cos() + half * angles.sin(), t[..., r:]), dim=-1)


class SwiGLU(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        x, gate = x.chunk(2, dim=-1)
        return F.silu(gate) * x


class FullAttention(nn.Module):
    """``[N, hidden, H, W, D] -> same``: one RMS group norm (a group per head), one linear layer to the MLP's input
    and q, k, v; attention over every token of the frame (q, k LayerNormed per head, axial RoPE on the first
    three quarters of a head's channels); out = x + drop_path(attn_out(attention) + ff_out(SwiGLU(mlp)))."""

    def __init__(self, hidden: int, heads: int, mlp: int, drop_path: float):
        super().__init__()
        self.heads, self.mlp, self.drop_path = heads, mlp, drop_path
        head = hidden // heads
        self.norm1 = RMSGroupNorm(heads, hidden)
        self.fused_ff_qkv = nn.Linear(hidden, mlp + 3 * hidden)
        self.activation = SwiGLU()
        self.ff_out = nn.Linear(mlp // 2, hidden)
        self.attn_out = nn.Linear(hidden, hidden, bias=False)
        self.q_norm = nn.LayerNorm(head)
        self.k_norm = nn.LayerNorm(head)
        self.rotary_emb = AxialRotary(head // 4)

    def forward(self, x: Tensor) -> Tensor:
        n, c, *grid = x.shape
        h = self.norm1(x).permute(0, 2, 3, 4, 1)
        ff, q, k, v = self.fused_ff_qkv(h).split((self.mlp, c, c, c), dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).permute(0, 4, 1, 2, 3, 5) for t in (q, k, v))  # [N, he, *S, c]
        angles = self.rotary_emb.axial_angles(grid).to(x.dtype)
        q, k = rotate(self.q_norm(q), angles), rotate(self.k_norm(k), angles)
        att = F.scaled_dot_product_attention(q.flatten(2, 4), k.flatten(2, 4), v.flatten(2, 4))
        att = att.unflatten(2, grid).permute(0, 2, 3, 4, 1, 5).flatten(-2)  # [N, *S, hidden]
        y = drop_path(self.attn_out(att) + self.ff_out(self.activation(ff)), self.drop_path, self.training)
        return y.permute(0, 4, 1, 2, 3) + x


def relative_bucket(distance: Tensor, causal: bool, num_buckets: int = 32, max_distance: int = 32) -> Tensor:
    """T5's bucket of each relative position (``key - query``): a causal one uses every bucket for the past (the
    future is masked); a bidirectional one half per sign. Upstream passes no ``max_distance`` to its bucketing, so the
    bucket function's default 32 holds."""
    n = -distance
    if causal:
        bucket = torch.zeros_like(n)
        n = n.clamp_min(0)
    else:
        num_buckets //= 2
        bucket = (n < 0).long() * num_buckets
        n = n.abs()
    exact = num_buckets // 2
    log_bucket = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact)
                          * (num_buckets - exact)).long()
    log_bucket = torch.minimum(log_bucket, torch.full_like(log_bucket, num_buckets - 1))
    return bucket + torch.where(n < exact, n, log_bucket)


class RelativePositionBias(nn.Module):
    """``T -> [1, heads, T, T]``: a learned bias per head and bucket; causal: the future is ``-inf``."""

    def __init__(self, heads: int, causal: bool, num_buckets: int = 32):
        super().__init__()
        self.causal = causal
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)

    def forward(self, length: int) -> Tensor:
        device = self.relative_attention_bias.weight.device
        positions = torch.arange(length, device=device)
        distance = positions[None, :] - positions[:, None]
        bias = self.relative_attention_bias(relative_bucket(distance, self.causal)).permute(2, 0, 1).unsqueeze(0)
        if self.causal:
            bias = bias.masked_fill(distance > 0, float("-inf"))
        return bias


class AxialTimeAttention(nn.Module):
    """``[T, B, hidden, H, W, D] -> same``: attention over time at every token (1x1x1 convolutions to q, k, v and
    out, q, k LayerNormed per head, T5 relative bias, causal); out = x + drop_path(out)."""

    def __init__(self, hidden: int, heads: int, causal: bool, drop_path: float):
        super().__init__()
        self.heads, self.drop_path = heads, drop_path
        head = hidden // heads
        self.norm1 = RMSGroupNorm(heads, hidden)
        self.input_head = nn.Conv3d(hidden, 3 * hidden, 1)
        self.output_head = nn.Conv3d(hidden, hidden, 1)
        self.qnorm = nn.LayerNorm(head)
        self.knorm = nn.LayerNorm(head)
        self.rel_pos_bias = RelativePositionBias(heads, causal)

    def forward(self, x: Tensor) -> Tensor:
        t, b, c, *grid = x.shape
        h = self.input_head(self.norm1(x.flatten(0, 1)))  # [T B, 3 hidden, *S], per head [q | k | v]
        h = h.reshape(t, b, self.heads, 3 * c // self.heads, -1).permute(1, 4, 2, 0, 3)  # [B, S, he, T, 3 c_h]
        q, k, v = h.chunk(3, dim=-1)
        bias = self.rel_pos_bias(t).to(x.dtype)
        y = F.scaled_dot_product_attention(self.qnorm(q), self.knorm(k), v, attn_mask=bias)
        y = y.permute(3, 0, 2, 4, 1).reshape(t * b, c, *grid)
        y = self.output_head(y).reshape(t, b, c, *grid)
        return drop_path(y, self.drop_path, self.training) + x


class SpaceTimeSplitBlock(nn.Module):
    """Time attention, then full spatial attention (``channel_mixing`` is the identity upstream: no tensors)."""

    def __init__(self, hidden: int, heads: int, mlp: int, causal: bool, drop_path: float):
        super().__init__()
        self.space_mixing = FullAttention(hidden, heads, mlp, drop_path)
        self.time_mixing = AxialTimeAttention(hidden, heads, causal, drop_path)

    def forward(self, x: Tensor) -> Tensor:
        x = self.time_mixing(x)
        return self.space_mixing(x.flatten(0, 1)).unflatten(0, x.shape[:2])

"""MPP's AViT in opzoo's own code (docs/models.md, "MPP"): the network of McCabe et al., "Multiple Physics
Pretraining for Spatiotemporal Surrogate Models" (NeurIPS 2024), as PolymathicAI/multiple_physics_pretraining
``models/*.py`` computes it at 38eefb1 (the submission commit, unchanged in function at e751fc2).

``AViTNet(x: [T, B, C, H, W], slots, periodic) -> [B, C, H, W]``: the frame after a history of ``T`` frames of ``C``
fields, each field the state slot ``slots[c]`` of a shared vocabulary of ``n_states`` slots:

1. each sample's fields standardized over its history and grid (``std`` unbiased, ``+ 1e-7``);
2. the fields projected into ``dim/4`` channels by the columns of their slots (times ``sqrt(n_states / C)``);
3. a hierarchical patch stem (4x4, 2x2, 2x2 strided convolutions with RMS instance norms): patch 16;
4. ``depth`` blocks, each attention over time at every patch, then axial attention over the patches' two axes
   (averaged) and an MLP; T5 relative position biases (32 buckets, bidirectional), periodic on a periodic axis;
5. the last frame decoded by transposed convolutions, the output kernel's rows of the same slots, and brought back to
   the input's units.

Where opzoo computes less than upstream, the result is the same function: only the last frame is decoded (upstream
decodes every frame, each on its own, and keeps the last).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NORMALIZATION_EPS = 1e-7  # added to the history's std (models/avit.py, AViT.forward)


def drop_path(x: Tensor, p: float, training: bool) -> Tensor:
    """Stochastic depth along ``x``'s first axis (timm's ``DropPath``, which upstream uses: a kept slice is divided by
    the keep probability). Upstream applies it to ``[T, B, ...]`` in the time block, so whole frames drop there."""
    if p == 0.0 or not training:
        return x
    keep = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(1.0 - p)
    return x * keep.div_(1.0 - p)


class RMSInstanceNorm2d(nn.Module):
    """``[N, C, H, W]``: each map divided by its (unbiased) standard deviation plus ``eps``, then scaled; no centring.
    ``bias`` is held because the published files hold it, and never used (as upstream)."""

    def __init__(self, dim: int, eps: float = 1e-8):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        std = torch.std(x, dim=(-2, -1), keepdim=True)
        return x / (std + self.eps) * self.weight[None, :, None, None]


class StateProjection(nn.Module):
    """``[..., C] -> [..., dim_out]``: a linear layer over the ``n_states`` slots of which the input holds ``C``
    (``slots``), rescaled by ``sqrt(n_states / C)`` (upstream's ``SubsampledLinear``)."""

    def __init__(self, n_states: int, dim_out: int):
        super().__init__()
        layer = nn.Linear(n_states, dim_out)
        self.weight = nn.Parameter(layer.weight.detach())
        self.bias = nn.Parameter(layer.bias.detach())

    def forward(self, x: Tensor, slots: Tensor) -> Tensor:
        scale = (self.weight.shape[1] / len(slots)) ** 0.5
        return scale * F.linear(x, self.weight[:, slots], self.bias)


class PatchStem(nn.Module):
    """``[N, dim/4, H, W] -> [N, dim, H/16, W/16]`` (upstream's ``hMLP_stem``; ``in_proj`` indices as its files)."""

    def __init__(self, dim: int):
        super().__init__()
        q = dim // 4
        self.in_proj = nn.Sequential(
            nn.Conv2d(q, q, kernel_size=4, stride=4, bias=False), RMSInstanceNorm2d(q), nn.GELU(),
            nn.Conv2d(q, q, kernel_size=2, stride=2, bias=False), RMSInstanceNorm2d(q), nn.GELU(),
            nn.Conv2d(q, dim, kernel_size=2, stride=2, bias=False), RMSInstanceNorm2d(dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.in_proj(x)


class PatchDecoder(nn.Module):
    """``[N, dim, h, w] -> [N, C, 16h, 16w]`` (upstream's ``hMLP_output``): two 2x2 transposed convolutions, then a
    4x4 one whose kernel and bias rows are those of the output's slots."""

    def __init__(self, dim: int, n_states: int):
        super().__init__()
        q = dim // 4
        self.out_proj = nn.Sequential(
            nn.ConvTranspose2d(dim, q, kernel_size=2, stride=2, bias=False), RMSInstanceNorm2d(q), nn.GELU(),
            nn.ConvTranspose2d(q, q, kernel_size=2, stride=2, bias=False), RMSInstanceNorm2d(q), nn.GELU())
        head = nn.ConvTranspose2d(q, n_states, kernel_size=4, stride=4)
        self.out_kernel = nn.Parameter(head.weight.detach())
        self.out_bias = nn.Parameter(head.bias.detach())

    def forward(self, x: Tensor, slots: Tensor) -> Tensor:
        return F.conv_transpose2d(self.out_proj(x), self.out_kernel[:, slots], self.out_bias[slots], stride=4)


def relative_bucket(distance: Tensor, num_buckets: int = 32, max_distance: int = 32) -> Tensor:
    """T5's bucket of each relative position (``key - query``), bidirectional: half the buckets for each sign, of
    which the first half exact and the rest logarithmic up to ``max_distance``. Upstream passes no ``max_distance``
    to its bucketing, so the bucket function's default 32 holds, not the 128 its module stores."""
    half = num_buckets // 2
    n = -distance
    bucket = (n < 0).long() * half
    n = n.abs()
    exact = half // 2
    log_bucket = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact) * (half - exact)).long()
    log_bucket = torch.minimum(log_bucket, torch.full_like(log_bucket, half - 1))
    return bucket + torch.where(n < exact, n, log_bucket)


class RelativePositionBias(nn.Module):
    """``(L, periodic) -> [1, heads, L, L]``: a learned bias per head and bucket of relative position. On a periodic
    axis a distance beyond half the length is wrapped (upstream's rule: ``d % (L//2)`` past ``-L//2``, ``d % -(L//2)``
    past ``L//2``)."""

    def __init__(self, heads: int, num_buckets: int = 32):
        super().__init__()
        self.relative_attention_bias = nn.Embedding(num_buckets, heads)

    def forward(self, length: int, periodic: bool = False) -> Tensor:
        device = self.relative_attention_bias.weight.device
        positions = torch.arange(length, dtype=torch.long, device=device)
        distance = positions[None, :] - positions[:, None]
        half = length // 2
        if periodic and half > 0:
            distance = torch.where(distance < -half, distance % half, distance)
            distance = torch.where(distance > half, torch.remainder(distance, -half), distance)
        bias = self.relative_attention_bias(relative_bucket(distance, self.relative_attention_bias.num_embeddings))
        return bias.permute(2, 0, 1).unsqueeze(0)


class HeadNorms(nn.Module):
    """The projections and per-head normalizations shared by both attention blocks: ``input_head`` (a 1x1
    convolution to q, k, v, laid out per head as ``[q | k | v]``), ``qnorm``/``knorm`` (LayerNorm over a head's
    channels), ``output_head`` and the relative position bias."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.input_head = nn.Conv2d(dim, 3 * dim, 1)
        self.output_head = nn.Conv2d(dim, dim, 1)
        self.qnorm = nn.LayerNorm(dim // heads)
        self.knorm = nn.LayerNorm(dim // heads)
        self.rel_pos_bias = RelativePositionBias(heads)

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``[N, dim, H, W] -> 3 x [N, heads, H, W, dim/heads]``, q and k normalized."""
        n, _, h, w = x.shape
        x = self.input_head(x).reshape(n, self.heads, -1, h, w).permute(0, 1, 3, 4, 2)
        q, k, v = x.tensor_split(3, dim=-1)
        return self.qnorm(q), self.knorm(k), v


class TimeAttention(HeadNorms):
    """``[T, B, dim, h, w] -> same``: attention over the ``T`` frames at each patch, pre- and post-normalized by
    instance norms, added back through the layer scale ``gamma``."""

    def __init__(self, dim: int, heads: int, drop_path: float = 0.0):
        super().__init__(dim, heads)
        self.drop_path = drop_path
        self.norm1 = nn.InstanceNorm2d(dim, affine=True)
        self.norm2 = nn.InstanceNorm2d(dim, affine=True)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        t, b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm1(x.reshape(t * b, c, h, w)))  # [(t b), heads, h, w, d]
        to_sequence = lambda a: a.reshape(t, b, *a.shape[1:]).permute(1, 3, 4, 2, 0, 5).reshape(  # noqa: E731
            b * h * w, self.heads, t, -1)
        y = F.scaled_dot_product_attention(to_sequence(q), to_sequence(k), to_sequence(v),
                                           attn_mask=self.rel_pos_bias(t))  # [(b h w), heads, t, d]
        y = y.reshape(b, h, w, self.heads, t, -1).permute(4, 0, 3, 5, 1, 2).reshape(t * b, c, h, w)
        y = self.output_head(self.norm2(y)).reshape(t, b, c, h, w)
        return drop_path(y * self.gamma[None, None, :, None, None], self.drop_path, self.training) + x


class AxialAttention(HeadNorms):
    """``[N, dim, h, w] -> same``: attention along each row and along each column with the same q, k, v, averaged,
    then an MLP; each branch RMS-normalized and added back through its layer scale."""

    def __init__(self, dim: int, heads: int, drop_path: float = 0.0):
        super().__init__(dim, heads)
        self.drop_path = drop_path
        self.norm1 = RMSInstanceNorm2d(dim)
        self.norm2 = RMSInstanceNorm2d(dim)
        self.gamma_att = nn.Parameter(1e-6 * torch.ones(dim))
        self.gamma_mlp = nn.Parameter(1e-6 * torch.ones(dim))
        self.mlp = MLP(dim)
        self.mlp_norm = RMSInstanceNorm2d(dim)

    def forward(self, x: Tensor, periodic: Sequence[bool]) -> Tensor:
        n, c, h, w = x.shape
        q, k, v = self.qkv(self.norm1(x))  # [n, heads, h, w, d]
        rows = lambda a: a.permute(0, 2, 1, 3, 4).reshape(n * h, self.heads, w, -1)  # noqa: E731
        along_w = F.scaled_dot_product_attention(rows(q), rows(k), rows(v),
                                                 attn_mask=self.rel_pos_bias(w, periodic[0]))
        along_w = along_w.reshape(n, h, self.heads, w, -1).permute(0, 2, 4, 1, 3).reshape(n, c, h, w)
        cols = lambda a: a.permute(0, 3, 1, 2, 4).reshape(n * w, self.heads, h, -1)  # noqa: E731
        along_h = F.scaled_dot_product_attention(cols(q), cols(k), cols(v),
                                                 attn_mask=self.rel_pos_bias(h, periodic[1]))
        along_h = along_h.reshape(n, w, self.heads, h, -1).permute(0, 2, 4, 3, 1).reshape(n, c, h, w)
        y = self.output_head(self.norm2((along_w + along_h) / 2))
        x = drop_path(y * self.gamma_att[None, :, None, None], self.drop_path, self.training) + x
        y = self.mlp_norm(self.mlp(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))
        return x + drop_path(self.gamma_mlp[None, :, None, None] * y, self.drop_path, self.training)


class MLP(nn.Module):
    def __init__(self, dim: int, ratio: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(dim, ratio * dim)
        self.fc2 = nn.Linear(ratio * dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class SpaceTimeBlock(nn.Module):
    """``[T, B, dim, h, w] -> same``: time attention, then axial attention on every frame."""

    def __init__(self, dim: int, heads: int, drop_path: float = 0.0):
        super().__init__()
        self.temporal = TimeAttention(dim, heads, drop_path)
        self.spatial = AxialAttention(dim, heads, drop_path)

    def forward(self, x: Tensor, periodic: Sequence[bool]) -> Tensor:
        t, b = x.shape[:2]
        x = self.temporal(x)
        return self.spatial(x.flatten(0, 1), periodic).unflatten(0, (t, b))


class AViTNet(nn.Module):
    """The network (see the module doc); tensor names as upstream's files hold them, without ``module.``."""

    patch_size = 16

    def __init__(self, dim: int = 768, heads: int = 12, depth: int = 12, n_states: int = 12,
                 drop_path: float = 0.2):
        super().__init__()
        self.space_bag = StateProjection(n_states, dim // 4)
        self.embed = PatchStem(dim)
        rates = [drop_path * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]  # numpy's linspace
        self.blocks = nn.ModuleList(SpaceTimeBlock(dim, heads, p) for p in rates)
        self.debed = PatchDecoder(dim, n_states)

    def normalize(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``x`` standardized per sample and field over its frames and grid, with the mean and std used."""
        with torch.no_grad():
            std, mean = torch.std_mean(x, dim=(0, -2, -1), keepdim=True)
            std = std + NORMALIZATION_EPS
        return (x - mean) / std, mean, std

    def features(self, x: Tensor, slots: Tensor, periodic: Sequence[bool],
                 run: Callable | None = None) -> Tensor:
        """``[T, B, C, H, W]`` (normalized) -> the tokens after the last block, ``[T, B, dim, H/16, W/16]``."""
        t, b = x.shape[:2]
        x = self.space_bag(x.permute(0, 1, 3, 4, 2), slots)  # [T, B, H, W, dim/4]
        x = self.embed(x.flatten(0, 1).permute(0, 3, 1, 2)).unflatten(0, (t, b))
        for block in self.blocks:
            x = run(block, x, periodic) if run is not None else block(x, periodic)
        return x

    def decode(self, tokens: Tensor, slots: Tensor) -> Tensor:
        """``[T, B, dim, h, w] -> [B, C, 16h, 16w]``: the last frame's tokens, decoded (normalized units)."""
        return self.debed(tokens[-1], slots)

    def forward(self, x: Tensor, slots: Tensor, periodic: Sequence[bool] = (False, False)) -> Tensor:
        normalized, mean, std = self.normalize(x)
        y = self.decode(self.features(normalized, slots, periodic), slots)
        return y * std[0] + mean[0]


def parameter_count(dim: int, heads: int, depth: int, n_states: int = 12, **_) -> int:
    """AViTNet's parameter count from its sizes (no tensor is built)."""
    q, head = dim // 4, dim // heads
    attention = (3 * dim * dim + 3 * dim) + (dim * dim + dim) + 4 * head + 32 * heads  # q/k/v, out, q/k norms, bias
    temporal = attention + 4 * dim + dim  # two instance norms, gamma
    spatial = attention + 4 * dim + 2 * dim + (8 * dim * dim + 5 * dim) + 2 * dim  # norms, gammas, MLP, its norm
    stem = 16 * q * q + 4 * q * q + 4 * q * dim + 4 * q + 2 * dim
    decoder = 4 * dim * q + 4 * q * q + 4 * q + 16 * q * n_states + n_states
    return n_states * q + q + stem + depth * (temporal + spatial) + decoder

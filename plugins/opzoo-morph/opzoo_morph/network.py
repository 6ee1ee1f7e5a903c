"""MORPH's network in opzoo's own code, on RevIN-normalized fields in upstream's layout (docs/models.md §9).

``MorphNet(v: [B, T, F, C, D, H, W]) -> [B, F, C, D, H, W]``: the frame after the window, for ``F <= max_fields``
fields of ``C <= max_components`` components each, 1-D data on ``W`` (``D = H = 1``), 2-D on ``(H, W)``, 3-D on
``(D, H, W)``. The computation is lanl/MORPH ``src/utils/vit_conv_xatt_axialatt2.py`` ``ViT3DRegression`` @ a16d5c4
(unchanged in function since the first upload, 6d5a2e6): per field a small convolution stack over the components,
patches (patch 1 on a singleton axis), one projection, a cross-attention that fuses the fields into one token per
patch, a learned position table, axial attention blocks (time, depth, height, width) and a linear decoder of the last
frame. Where opzoo computes less than upstream, the result is the same function:

- a convolution over a singleton axis (2-D data in a 3-D convolution) uses only the kernel's middle slice, so the
  2-D and 1-D convolutions with that slice are run (upstream pads the axis with zeros and runs all three);
- the zero-padded patch features meet only the projection's first columns, so only those are multiplied;
- only the last frame is decoded (upstream decodes every frame and keeps the last).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ComponentConvs(nn.Module):
    """``[N, C, D, H, W] -> [N, filters, D, H, W]``: the components zero-padded to ``max_components``, a 1x1x1
    convolution to 8 channels, then 3x3x3 convolutions doubling up to ``filters`` and one more at ``filters``, each
    followed by LeakyReLU(0.2); no biases."""

    def __init__(self, max_components: int, filters: int, hidden: int = 8):
        super().__init__()
        self.max_components = max_components
        self.components_in = nn.Conv3d(max_components, hidden, 1, bias=False)
        widths = [hidden]
        while widths[-1] < filters:
            widths.append(min(2 * widths[-1], filters))
        widths.append(filters)
        self.convs = nn.ModuleList(nn.Conv3d(a, b, 3, padding=1, bias=False) for a, b in zip(widths, widths[1:]))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[1] < self.max_components:
            x = torch.cat([x, x.new_zeros(x.shape[0], self.max_components - x.shape[1], *x.shape[2:])], dim=1)
        x = F.conv3d(x, self.components_in.weight)
        d, h = x.shape[2], x.shape[3]
        for conv in self.convs:
            w = conv.weight
            if d == 1 and h == 1:  # 1-D: only the kernel's middle row along D and H meets data
                x = F.conv1d(x[:, :, 0, 0], w[:, :, 1, 1], padding=1)[:, :, None, None]
            elif d == 1:
                x = F.conv2d(x[:, :, 0], w[:, :, 1], padding=1)[:, :, None]
            else:
                x = F.conv3d(x, w, padding=1)
            x = F.leaky_relu(x, 0.2)
        return x


def patch_sizes(grid: tuple[int, int, int], patch: int) -> tuple[int, int, int]:
    """The patch on each of ``(D, H, W)``: ``patch``, or 1 on a singleton axis."""
    return tuple(1 if n == 1 else patch for n in grid)  # type: ignore[return-value]


class FieldEmbedding(nn.Module):
    """``[B, T, F, C, D, H, W] -> [B, T, n, dim]``: per field the component convolutions and its patches projected to
    ``dim``; the ``F`` fields of a patch fused into one token by attention from a learned query."""

    def __init__(self, patch: int, max_components: int, filters: int, dim: int, heads: int):
        super().__init__()
        self.patch = patch
        self.convs = ComponentConvs(max_components, filters)
        self.project = nn.Linear(filters * patch**3, dim)
        self.field_query = nn.Parameter(torch.randn(1, 1, dim))
        self.field_attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, v: Tensor) -> Tensor:
        b, t, f, c, d, h, w = v.shape
        x = self.convs(v.reshape(b * t * f, c, d, h, w))
        pd, ph, pw = patch_sizes((d, h, w), self.patch)
        k = x.shape[1]
        x = x.reshape(b * t * f, k, d // pd, pd, h // ph, ph, w // pw, pw).permute(0, 2, 4, 6, 1, 3, 5, 7)
        n, feats = (d // pd) * (h // ph) * (w // pw), k * pd * ph * pw
        x = x.reshape(b * t, f, n, feats).transpose(1, 2).reshape(b * t * n, f, feats)
        x = F.linear(x, self.project.weight[:, :feats], self.project.bias)  # the zero padding adds nothing
        q = self.field_query.expand(x.shape[0], -1, -1)
        fused = self.field_attn(q, x, x, need_weights=False)[0]
        return fused.reshape(b, t, n, -1)


class PositionTable(nn.Module):
    """A learned ``[1, max_ar, max_patches, dim]`` table, resampled to ``t`` frames and ``n`` patches. ``slice``: the
    first ``t`` rows, linear interpolation over the patches; ``interpolate``: bilinear (antialiased) over both."""

    def __init__(self, max_ar: int, max_patches: int, dim: int, mode: str):
        super().__init__()
        self.mode = mode
        self.table = nn.Parameter(torch.randn(1, max_ar, max_patches, dim))

    def forward(self, t: int, n: int) -> Tensor:
        """``[1, t, n, dim]``."""
        pe = self.table.permute(0, 3, 1, 2)  # [1, dim, max_ar, max_patches]
        if self.mode == "interpolate":
            pe = F.interpolate(pe, size=(t, n), mode="bilinear", align_corners=False, antialias=True)
            return pe.permute(0, 2, 3, 1)
        dim = pe.shape[1]
        pe = F.interpolate(pe[:, :, :t].reshape(1, dim * t, -1), size=n, mode="linear", align_corners=False)
        return pe.reshape(1, dim, t, n).permute(0, 2, 3, 1)


class AxisAttention(nn.Module):
    """Multi-head self-attention along one axis, ``[N, L, dim] -> [N, L, dim]``; over one token it is the value
    projection (the softmax of one score is 1)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: Tensor) -> Tensor:
        n, length, dim = x.shape
        if length == 1:
            return self.o(self.v(x))
        split = lambda y: y.reshape(n, length, self.heads, dim // self.heads).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        return self.o(y.transpose(1, 2).reshape(n, length, dim))


class AxialAttention(nn.Module):
    """``[B, T, n, dim] -> [B, T, n, dim]`` on the token grid ``(D', H', W')``: with more than one frame, attention
    along time is added to the tokens first; then ``x + A_D(x) + A_H(x) + A_W(x)`` (the input included)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.time, self.depth, self.height, self.width = (AxisAttention(dim, heads) for _ in range(4))

    def forward(self, x: Tensor, grid: tuple[int, int, int]) -> Tensor:
        b, t, n, e = x.shape
        d, h, w = grid
        x = x.reshape(b, t, d, h, w, e)
        if t > 1:
            xt = x.permute(0, 2, 3, 4, 1, 5).reshape(-1, t, e)
            x = x + self.time(xt).reshape(b, d, h, w, t, e).permute(0, 4, 1, 2, 3, 5)
        xd = self.depth(x.permute(0, 1, 3, 4, 2, 5).reshape(-1, d, e)).reshape(b, t, h, w, d, e).permute(0, 1, 4, 2, 3, 5)
        xh = self.height(x.permute(0, 1, 2, 4, 3, 5).reshape(-1, h, e)).reshape(b, t, d, w, h, e).permute(0, 1, 2, 4, 3, 5)
        xw = self.width(x.reshape(-1, w, e)).reshape(b, t, d, h, w, e)
        return (x + xd + xh + xw).reshape(b, t, n, e)


class MorphBlock(nn.Module):
    """Pre-norm: ``x + axial(LN(x))``, then ``x + MLP(LN(x))`` (GELU, dropout after each linear's activation and
    output)."""

    def __init__(self, dim: int, heads: int, mlp_dim: int, dropout: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = AxialAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, grid: tuple[int, int, int]) -> Tensor:
        x = x + self.attn(self.norm1(x), grid)
        return x + self.drop(self.fc2(self.drop(F.gelu(self.fc1(self.norm2(x))))))


class MorphNet(nn.Module):
    """MORPH's network: ``[B, T, F, C, D, H, W] -> [B, F, C, D, H, W]`` (normalized units)."""

    def __init__(self, *, patch_size: int, dim: int, depth: int, heads: int, heads_xa: int, mlp_dim: int,
                 max_components: int, conv_filters: int, max_ar: int, max_patches: int, max_fields: int,
                 time_positions: str, dropout: float, emb_dropout: float):
        super().__init__()
        self.patch = patch_size
        self.embed = FieldEmbedding(patch_size, max_components, conv_filters, dim, heads_xa)
        self.positions = PositionTable(max_ar, max_patches, dim, time_positions)
        self.emb_drop = nn.Dropout(emb_dropout)
        self.blocks = nn.ModuleList(MorphBlock(dim, heads, mlp_dim, dropout) for _ in range(depth))
        self.head_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, max_fields * max_components * patch_size**3)

    def features(self, v: Tensor, checkpointed=None) -> Tensor:
        """``[B, T, F, C, D, H, W] -> [B, T, n, dim]``: the tokens after the last block."""
        x = self.embed(v)
        # upstream adds the table, then applies the same dropout twice (once inside its position module)
        x = self.emb_drop(x + self.emb_drop(self.positions(x.shape[1], x.shape[2])))
        grid = self.token_grid(v.shape[-3:])
        for block in self.blocks:
            x = block(x, grid) if checkpointed is None else checkpointed(block, x, grid)
        return x

    def token_grid(self, grid) -> tuple[int, int, int]:
        return tuple(n // p for n, p in zip(grid, patch_sizes(tuple(grid), self.patch)))  # type: ignore[return-value]

    def decode(self, tokens: Tensor, fields: int, components: int, grid: tuple[int, int, int]) -> Tensor:
        """``[B, T, n, dim] -> [B, F, C, D, H, W]``: the last frame's tokens to patches."""
        pd, ph, pw = patch_sizes(grid, self.patch)
        nd, nh, nw = self.token_grid(grid)
        y = self.head(self.head_norm(tokens[:, -1]))[..., :fields * components * pd * ph * pw]
        b = y.shape[0]
        y = y.reshape(b, nd, nh, nw, fields, components, pd, ph, pw).permute(0, 4, 5, 1, 6, 2, 7, 3, 8)
        return y.reshape(b, fields, components, *grid)

    def forward(self, v: Tensor) -> Tensor:
        return self.decode(self.features(v), v.shape[2], v.shape[3], tuple(v.shape[-3:]))


def parameter_count(dim: int, depth: int, mlp_dim: int, conv_filters: int, patch_size: int, max_ar: int,
                    max_patches: int, max_fields: int, max_components: int, **_) -> int:
    """MorphNet's parameter count from its sizes (no tensor is built)."""
    widths = [8]
    while widths[-1] < conv_filters:
        widths.append(min(2 * widths[-1], conv_filters))
    widths.append(conv_filters)
    convs = max_components * 8 + sum(27 * a * b for a, b in zip(widths, widths[1:]))
    embed = convs + conv_filters * patch_size**3 * dim + dim + dim + 4 * dim * dim + 4 * dim
    block = 4 * dim + 16 * (dim * dim + dim) + 2 * mlp_dim * dim + mlp_dim + dim
    head = 2 * dim + dim * max_fields * max_components * patch_size**3 + max_fields * max_components * patch_size**3
    return embed + max_ar * max_patches * dim + depth * block + head


"""PDE-Transformer, mixed channels (Holzschuh et al., ICML 2025): the network of ``pdetransformer`` 0.1.11's
``core/mixed_channels/pde_transformer.py`` (``PDEImpl``; identical at tum-pbs/pde-transformer 850e09d, last changed
in 3f3adee, 2025-06-23), written for opzoo. Channels-first inside: ``[B, C, H, W] -> [B, C, H, W]``.

A U-shaped stack of Swin-v2 stages conditioned, DiT-style, on a diffusion time (0 for a supervised step) and a class
label (the PDE's id; ``num_classes`` is the "no label" class):

    tokens = Conv(p x p, stride p)(x)                          # [B, D, H/p, W/p]
    encoder level i (i < L):  stage_i(tokens, e_i), kept; Conv3x3 + PixelUnshuffle(2)  (dim D_i -> D_{i+1})
    latent:                   stage_L(tokens, e_L)
    decoder level i (L-1..1): Conv3x3 + PixelShuffle(2), concat the encoder's level i, Conv1x1, stage(., e_i)
    decoder level 0:          the same with the encoder's level 0, at dim D_1, conditioned on e_1
    out = FinalLayer(Conv3x3(h), e_1), unpatchified to [B, C_out, H, W]

with ``D_i = min(D * 2^i, max_hidden)``, ``e_i = TimestepEmbed_i(1000 t) + LabelEmbed_i(y)``. A stage is ``depth``
blocks on 8x8 windows, every second one shifted by half a window (a roll: with ``periodic`` the wrap-around is the
boundary condition; without it Swin's mask keeps wrapped tokens apart, added twice as upstream does). A block:

    h = h + (1 + g1) * A(LN(h) (1 + s1) + b1),   h = h + (1 + g2) * MLP(LN(h) (1 + s2) + b2)

(``b, s, g`` from ``Linear(SiLU(e))``; note the gates enter as ``1 + g``), with ``A`` Swin-v2's cosine window
attention (logit scale clamped at 4.6052, about log 100, a continuous position bias ``16 sigmoid(MLP(log-spaced offsets))``) and no
output projection.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def windows(x: Tensor, size: int) -> Tensor:
    """``[B, H, W, D] -> [B * H/size * W/size, size*size, D]``, windows batch-major then row-major."""
    b, h, w, d = x.shape
    x = x.view(b, h // size, size, w // size, size, d).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, size * size, d)


def unwindows(x: Tensor, size: int, h: int, w: int) -> Tensor:
    """The inverse of :func:`windows`: ``[B * n_windows, size*size, D] -> [B, H, W, D]``."""
    d = x.shape[-1]
    x = x.view(-1, h // size, w // size, size, size, d).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, d)


class TimestepEmbedding(nn.Module):
    """DiT's sinusoidal embedding of a time ``t [B]`` (256 frequencies, cos then sin) through Linear-SiLU-Linear."""

    def __init__(self, dim: int, frequencies: int = 256):
        super().__init__()
        self.frequencies = frequencies
        self.mlp = nn.Sequential(nn.Linear(frequencies, dim), nn.SiLU(), nn.Linear(dim, dim))

    def sinusoid(self, t: Tensor) -> Tensor:
        """``[N] -> [N, frequencies]`` (cos then sin), in float32 as upstream computes it whatever the weights' dtype:
        its rounding (exp, cos, sin of angles up to ~1000 rad) differs between CPUs' vector units."""
        half = self.frequencies // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        angles = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)

    def forward(self, t: Tensor) -> Tensor:
        return self.mlp(self.sinusoid(t).to(self.mlp[0].weight.dtype))


class LabelEmbedding(nn.Module):
    """A table of ``num_classes`` labels plus the "no label" row used for classifier-free dropout (probability
    ``dropout`` in training, as upstream trained)."""

    def __init__(self, num_classes: int, dim: int, dropout: float):
        super().__init__()
        self.num_classes = num_classes
        self.dropout = dropout
        self.embedding_table = nn.Embedding(num_classes + int(dropout > 0), dim)

    def forward(self, labels: Tensor) -> Tensor:
        if self.training and self.dropout > 0:
            drop = torch.rand(labels.shape[0], device=labels.device) < self.dropout
            labels = torch.where(drop, self.num_classes, labels)
        return self.embedding_table(labels)


class Modulation(nn.Module):
    """``Linear(SiLU(e))`` split into ``n`` ``[B, D]`` shift/scale/gate terms (the parameters of adaLN-Zero)."""

    def __init__(self, dim: int, n: int):
        super().__init__()
        self.n = n
        self.linear = nn.Linear(dim, n * dim)

    def forward(self, e: Tensor) -> tuple[Tensor, ...]:
        return self.linear(F.silu(e)).chunk(self.n, dim=1)


class RelativePositionBias(nn.Module):
    """Swin-v2's continuous bias: an MLP of log-spaced window offsets, ``16 sigmoid(.)``, ``[heads, N, N]``."""

    def __init__(self, window: int, heads: int):
        super().__init__()
        self.heads = heads
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512), nn.ReLU(), nn.Linear(512, heads, bias=False))
        offsets = torch.arange(-(window - 1), window, dtype=torch.float32) / (window - 1) * 8
        table = torch.stack(torch.meshgrid(offsets, offsets, indexing="ij"), dim=-1)  # [2w-1, 2w-1, 2]
        table = torch.sign(table) * torch.log2(table.abs() + 1.0) / math.log2(8)
        self.register_buffer("table", table, persistent=False)
        pos = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (pos[:, :, None] - pos[:, None, :]) + (window - 1)  # [2, N, N]
        self.register_buffer("index", rel[0] * (2 * window - 1) + rel[1], persistent=False)

    def forward(self) -> Tensor:
        bias = self.cpb_mlp(self.table).view(-1, self.heads)[self.index.view(-1)]
        n = self.index.shape[0]
        return 16 * torch.sigmoid(bias.view(n, n, self.heads).permute(2, 0, 1))


LOGIT_SCALE_MAX = 4.6052  # upstream's literal (about log 100)


class WindowAttention(nn.Module):
    """Cosine attention in a window, ``[B', N, D] -> [B', N, D]``, without an output projection."""

    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))
        self.pos_emb_funct = RelativePositionBias(window, heads)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=LOGIT_SCALE_MAX).exp() + self.pos_emb_funct()
        if mask is not None:  # [n_windows, N, N], added twice as pdetransformer 0.1.11 does
            m = mask[None, :, None]
            attn = attn.view(b // mask.shape[0], mask.shape[0], self.heads, n, n) + m
            attn = (attn + m).view(b, self.heads, n, n)
        return (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, d)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """One adaLN-modulated Swin-v2 block on windows ``[B * n_windows, N, D]``, conditioned on ``e [B, D]``."""

    def __init__(self, dim: int, heads: int, window: int, mlp_ratio: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.adain_2 = Modulation(dim, 6)

    def forward(self, x: Tensor, e: Tensor, mask: Tensor | None) -> Tensor:
        per_window = x.shape[0] // e.shape[0]
        b1, s1, g1, b2, s2, g2 = (t.repeat_interleave(per_window, dim=0)[:, None] for t in self.adain_2(e))
        x = x + (1 + g1) * self.attn(self.norm1(x) * (1 + s1) + b1, mask)
        return x + (1 + g2) * self.mlp(self.norm2(x) * (1 + s2) + b2)


class Stage(nn.Module):
    """``depth`` blocks, ``[B, D, H, W] -> [B, D, H, W]``: windows of ``window``, every second block shifted by half a
    window. The separate-channel stage is this one with a channel axis before ``D`` (``separate_net.Stage``)."""

    block_class = Block
    mask_small_grids = False  # pdetransformer's mixed stage leaves a grid smaller than a window unmasked

    def __init__(self, dim: int, depth: int, heads: int, window: int, mlp_ratio: float, periodic: bool):
        super().__init__()
        self.window = window
        self.periodic = periodic
        self.blocks = nn.ModuleList(self.block_class(dim, heads, window, mlp_ratio) for _ in range(depth))

    windows = staticmethod(windows)  # the module's: the separate-channel stage's module has its own
    unwindows = staticmethod(unwindows)

    def region_ids(self, region: Tensor) -> Tensor:
        """``[H, W]`` region labels -> ``[n_windows, N]`` per window token."""
        return self.windows(region[None, :, :, None], self.window)[..., 0]

    def shift_mask(self, h: int, w: int, device) -> Tensor | None:
        """Swin's mask for a shifted window that wraps around a non-periodic domain (-100 across regions)."""
        size, shift = self.window, self.window // 2
        if self.periodic or (not self.mask_small_grids and (h < size or w < size)):
            return None
        region = torch.zeros(h, w, device=device)
        cuts = (slice(0, -size), slice(-size, -shift), slice(-shift, None))
        for i, rows in enumerate(cuts):
            for j, cols in enumerate(cuts):
                region[rows, cols] = 3 * i + j
        ids = self.region_ids(region)
        return (ids[:, None, :] != ids[:, :, None]).float() * -100.0

    def forward(self, x: Tensor, e: Tensor) -> Tensor:
        """``[B, (C,) D, H, W]``, the features before the grid."""
        h, w = x.shape[-2:]
        size = self.window
        mask = self.shift_mask(h, w, x.device)
        pad_h, pad_w = (-h) % size, (-w) % size
        x = x.movedim(-3, -1)  # features last
        for n, block in enumerate(self.blocks):
            shift = size // 2 if n % 2 else 0
            y = torch.roll(x, (-shift, -shift), dims=(-3, -2)) if shift else x
            y = F.pad(y, (0, 0, 0, pad_w, 0, pad_h))
            y = self.unwindows(block(self.windows(y, size), e, mask if shift else None), size, h + pad_h, w + pad_w)
            y = y[..., :h, :w, :]
            x = torch.roll(y, (shift, shift), dims=(-3, -2)) if shift else y
        return x.movedim(-1, -3)


def u_shape_features(net: nn.Module, x: Tensor, e: list[Tensor], keep: Sequence[int], run, layer,
                     cat_dim: int) -> tuple[Tensor, list[Tensor]]:
    """The U-shape both PDE-Transformers share: patch embedding, encoder levels (each kept for its skip, then
    down-sampled), the latent, decoder levels (up-sampled, concatenated with the skip, reduced), decoder level 0 at
    ``D_1`` conditioned on ``e_1``. ``layer(module, x)`` applies a 2D layer; ``run(stage, x, e)`` a stage; the outputs of
    the stages ``keep`` (indices in the order the data meets them) are returned with the last."""
    run = run or (lambda stage, *args: stage(*args))
    kept, skips, n = [], [], 0

    def stage(name: str, h: Tensor, emb: Tensor) -> Tensor:
        nonlocal n
        h = run(getattr(net, name), h, emb)
        if n in keep:
            kept.append(h)
        n += 1
        return h

    x = layer(net.x_embedder.proj, x)
    for i in range(net.levels):
        x = stage(f"encoder_level_{i}", x, e[i])
        skips.append(x)
        x = layer(getattr(net, f"down{i}_{i + 1}"), x)
    x = stage("latent", x, e[net.levels])
    for i in range(net.levels - 1, 0, -1):
        x = torch.cat([layer(getattr(net, f"up{i + 1}_{i}"), x), skips[i]], dim=cat_dim)
        x = stage(f"decoder_level_{i}", layer(getattr(net, f"reduce_chan_level{i}"), x), e[i])
    x = layer(net.reduce_chan_level0, torch.cat([layer(net.up1_0, x), skips[0]], dim=cat_dim))
    return stage("decoder_level_0", x, e[1]), kept


def stage_names(levels: int) -> list[str]:
    """The stages in the order the data meets them: encoder levels, the latent, decoder levels L-1 .. 0."""
    return ([f"encoder_level_{i}" for i in range(levels)] + ["latent"]
            + [f"decoder_level_{i}" for i in range(levels - 1, -1, -1)])


class Resample(nn.Module):
    """Conv3x3 without bias, then Pixel(Un)Shuffle(2): the levels' down- and up-sampling."""

    def __init__(self, dim_in: int, dim_out: int, shuffle: nn.Module):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(dim_in, dim_out, 3, padding=1, bias=False), shuffle)

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class FinalLayer(nn.Module):
    """Parameter-free LayerNorm over channels, modulated by ``e``, then Conv3x3 to ``C_out * p * p``."""

    def __init__(self, dim: int, out: int):
        super().__init__()
        self.out_proj = nn.Conv2d(dim, out, 3, padding=1)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))

    def forward(self, x: Tensor, e: Tensor) -> Tensor:
        shift, scale = self.adaLN_modulation(e).chunk(2, dim=1)
        x = F.layer_norm(x.permute(0, 2, 3, 1), x.shape[1:2], eps=1e-6).permute(0, 3, 1, 2)
        return self.out_proj(x * (1 + scale[:, :, None, None]) + shift[:, :, None, None])


class MixedChannelNet(nn.Module):
    """``[B, C_in, H, W] -> [B, C_out, H, W]`` with ``H, W`` multiples of ``patch_size * 2^levels``; see the module
    docstring. Parameter names are pdetransformer's ``PDEImpl``'s."""

    def __init__(self, in_channels: int, out_channels: int, hidden_size: int, depth: Sequence[int], num_heads: int,
                 window_size: int = 8, patch_size: int = 4, mlp_ratio: float = 4.0, num_classes: int = 1000,
                 class_dropout_prob: float = 0.1, periodic: bool = True, max_hidden_size: int = 2048):
        super().__init__()
        if len(depth) % 2 != 1:
            raise ValueError(f"depth {list(depth)}: an odd number of stages (encoder, latent, decoder)")
        self.levels = levels = len(depth) // 2
        self.patch_size, self.out_channels, self.num_classes = patch_size, out_channels, num_classes
        dims = [min(hidden_size * 2**i, max_hidden_size) for i in range(levels + 1)]

        def stage(dim: int, n: int) -> Stage:
            return Stage(dim, n, num_heads, window_size, mlp_ratio, periodic)

        self.x_embedder = nn.Module()
        self.x_embedder.proj = nn.Conv2d(in_channels, hidden_size, patch_size, stride=patch_size)
        for i, dim in enumerate(dims):
            setattr(self, f"t_embedder_{i}", TimestepEmbedding(dim))
            setattr(self, f"y_embedder_{i}", LabelEmbedding(num_classes, dim, class_dropout_prob))
        for i in range(levels):
            setattr(self, f"encoder_level_{i}", stage(dims[i], depth[i]))
            keep = dims[i] == max_hidden_size
            setattr(self, f"down{i}_{i + 1}", Resample(dims[i], dims[i] // (4 if keep else 2), nn.PixelUnshuffle(2)))
        self.latent = stage(dims[levels], depth[levels])
        for i in range(1, levels):
            up = min(2 * dims[i], max_hidden_size)
            keep = 2 * dims[i] >= max_hidden_size
            setattr(self, f"up{i + 1}_{i}", Resample(up, up * (4 if keep else 2), nn.PixelShuffle(2)))
            setattr(self, f"reduce_chan_level{i}", nn.Conv2d(2 * dims[i], dims[i], 1))
            setattr(self, f"decoder_level_{i}", stage(dims[i], depth[levels + i + 1]))
        keep = dims[1] >= max_hidden_size
        self.up1_0 = Resample(dims[1], dims[1] * (4 if keep else 2), nn.PixelShuffle(2))
        self.reduce_chan_level0 = nn.Conv2d(2 * dims[0], dims[1], 1)
        self.decoder_level_0 = stage(dims[1], depth[levels + 1])
        self.output = nn.Conv2d(dims[1], dims[1], 3, padding=1)
        self.final_layer = FinalLayer(dims[1], out_channels * patch_size * patch_size)

    @property
    def size_multiple(self) -> int:
        return self.patch_size * 2**self.levels

    @property
    def stage_names(self) -> list[str]:
        return stage_names(self.levels)

    def embeddings(self, batch: int, t: Tensor | None, labels: Tensor | None, device) -> list[Tensor]:
        """``e_i [B, D_i]`` per level: ``t [B]`` in [0, 1] (``None``: 0, a supervised step) and ``labels [B]``
        (``None``: the no-label class)."""
        t = torch.zeros(batch, device=device) if t is None else t.to(device).expand(batch)
        if labels is None:
            labels = torch.full((batch,), self.num_classes, dtype=torch.long, device=device)
        return [getattr(self, f"t_embedder_{i}")(1000.0 * t) + getattr(self, f"y_embedder_{i}")(labels)
                for i in range(self.levels + 1)]

    def features(self, x: Tensor, e: list[Tensor], keep: Sequence[int] = (), run=None) -> tuple[Tensor, list[Tensor]]:
        """``[B, C_in, H, W] -> ([B, D_1, H/p, W/p]`` after the last decoder stage, the outputs of the stages
        ``keep`` (indices into :attr:`stage_names`)); ``run(stage, x, e)`` calls each stage (e.g. checkpointed)."""
        return u_shape_features(self, x, e, keep, run, lambda module, y: module(y), cat_dim=1)

    def head(self, h: Tensor, e1: Tensor) -> Tensor:
        """``[B, D_1, H/p, W/p] -> [B, C_out, H, W]``: Conv3x3, the final layer conditioned on ``e_1``, unpatchify."""
        b, _, hp, wp = h.shape
        p, c = self.patch_size, self.out_channels
        x = self.final_layer(self.output(h), e1).permute(0, 2, 3, 1).reshape(b, hp, wp, p, p, c)
        return x.permute(0, 5, 1, 3, 2, 4).reshape(b, c, hp * p, wp * p)

    def forward(self, x: Tensor, t: Tensor | None = None, labels: Tensor | None = None) -> Tensor:
        e = self.embeddings(x.shape[0], t, labels, x.device)
        return self.head(self.features(x, e)[0], e[1])

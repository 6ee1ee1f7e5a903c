"""Poseidon's network, scOT (Herde et al. 2024): opzoo's own implementation of the function camlab-ethz/poseidon's
``scOT/model.py`` computes at tag v1-paper (2cc8c85) with transformers 4.29.2, the versions that trained the published
weights. The tensor names are upstream's, so its checkpoints load as they are.

A U-shaped Swin-v2 transformer on one frame ``[B, C, H, W]`` and a lead time ``t [B]``:

- patch embedding (a ``p x p`` convolution), then per stage ``depths[i]`` Swin-v2 blocks and a patch merging; the
  decoder mirrors it with patch "unmerging", adding each encoder stage's output after ConvNeXt blocks (the skips);
  a transposed convolution and a 5x5 convolution recover the fields;
- every layer norm is conditioned on ``t``: ``(x - E[x]) / sqrt(E[x^2] - E[x]^2 + eps) * W(t) + b(t)`` with ``W``, ``b``
  affine maps of ``t`` (upstream's ``ConditionalLayerNorm``; the variance as it writes it, not torch's);
- Swin-v2 blocks: post-norm residuals ``x + LN(attn(x))``, ``x + LN(mlp(x))``; windowed cosine attention with a
  learned per-head logit scale (clamped at log 100) and a continuous position bias ``16 sigmoid(mlp(log-spaced
  offsets))``; in shifted windows transformers 4.29.2 adds the -100 mask twice, which is kept;
- a grid other than the model's is Fourier-resampled to it and the prediction back (square grids only).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ConditionalLayerNorm(nn.Module):
    """``[..., d]`` normalized over ``d``, scaled and shifted by affine maps of the lead time ``t [B]``."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Linear(1, dim)
        self.bias = nn.Linear(1, dim)

    def forward(self, x: Tensor, time: Tensor) -> Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = (x**2).mean(dim=-1, keepdim=True) - mean**2
        x = (x - mean) / (var + self.eps).sqrt()
        t = time.reshape(-1, 1).type_as(x)
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        return self.weight(t).view(shape) * x + self.bias(t).view(shape)


def _on_default_device(make):
    """``make(*args)`` computed once on the CPU per arguments, then copied to the default device (a model built on
    ``meta`` for its shapes would otherwise run every table's ops through torch's slow meta kernels)."""
    cached = functools.lru_cache(maxsize=None)(make)

    @functools.wraps(make)
    def on_device(*args):
        return cached(*args).to(torch.get_default_device(), copy=True)

    return on_device


@_on_default_device
def position_table(window: int) -> Tensor:
    """``[1, 2w-1, 2w-1, 2]``: Swin-v2's log-spaced relative offsets, in float32 as transformers builds them."""
    r = torch.arange(-(window - 1), window, dtype=torch.float32, device="cpu")
    table = torch.stack(torch.meshgrid(r, r, indexing="ij")).permute(1, 2, 0).contiguous().unsqueeze(0)
    table = table / (window - 1) * 8 if window > 1 else table * 8
    return torch.sign(table) * torch.log2(torch.abs(table) + 1.0) / math.log2(8)


@_on_default_device
def position_index(window: int) -> Tensor:
    """``[w^2, w^2]``: the row of the offset table for each pair of positions in a window."""
    cpu = torch.arange(window, device="cpu")
    coords = torch.stack(torch.meshgrid(cpu, cpu, indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
    return rel[:, :, 0] * (2 * window - 1) + rel[:, :, 1]


class _Dense(nn.Module):
    def __init__(self, fan_in: int, fan_out: int):
        super().__init__()
        self.dense = nn.Linear(fan_in, fan_out)


class CosineSelfAttention(nn.Module):
    """Swin-v2's windowed cosine attention: ``[B*nW, w^2, d] -> [B*nW, w^2, d]``."""

    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        self.heads, self.window = heads, window
        self.logit_scale = nn.Parameter(torch.full((heads, 1, 1), math.log(10.0)))  # log 10, as Swin-v2 starts
        self.continuous_position_bias_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                                          nn.Linear(512, heads, bias=False))
        self.register_buffer("relative_coords_table", position_table(window), persistent=False)
        self.register_buffer("relative_position_index", position_index(window), persistent=False)
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim)

    def position_bias(self) -> Tensor:
        """``[heads, w^2, w^2]``."""
        n = self.window * self.window
        table = self.continuous_position_bias_mlp(self.relative_coords_table).view(-1, self.heads)
        bias = table[self.relative_position_index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        return 16 * torch.sigmoid(bias)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        b, n, d = x.shape
        q, k, v = (f(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
                   for f in (self.query, self.key, self.value))
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        scores = scores * torch.clamp(self.logit_scale, max=math.log(1.0 / 0.01)).exp() + self.position_bias()
        if mask is not None:  # [nW, n, n], added twice as transformers 4.29.2 does
            windows = mask.shape[0]
            scores = (scores.view(b // windows, windows, self.heads, n, n) + 2 * mask[None, :, None]).view(b, -1, n, n)
        out = scores.softmax(dim=-1) @ v
        return out.transpose(1, 2).reshape(b, n, d)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        setattr(self, "self", CosineSelfAttention(dim, heads, window))  # transformers' names: attention.self.*
        self.output = _Dense(dim, dim)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.output.dense(getattr(self, "self")(x, mask))


@_on_default_device
def shift_mask(size: int, window: int, shift: int) -> Tensor:
    """``[nW, w^2, w^2]``: 0 between positions of one region of the shifted grid, -100 across regions."""
    regions = torch.zeros(size, size, device="cpu")
    cuts = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    for i, (h, w) in enumerate((h, w) for h in cuts for w in cuts):
        regions[h, w] = i
    windows = partition(regions[None, :, :, None], window).reshape(-1, window * window)
    diff = windows[:, None, :] - windows[:, :, None]
    return torch.where(diff != 0, -100.0, 0.0)


def partition(x: Tensor, window: int) -> Tensor:
    """``[B, H, W, d] -> [B * nW, w, w, d]``."""
    b, h, w, d = x.shape
    x = x.view(b, h // window, window, w // window, window, d)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window, window, d)


def unpartition(x: Tensor, window: int, h: int, w: int) -> Tensor:
    """``[B * nW, w, w, d] -> [B, H, W, d]``."""
    d = x.shape[-1]
    x = x.view(-1, h // window, w // window, window, window, d)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, h, w, d)


class SwinBlock(nn.Module):
    """A Swin-v2 block at a fixed grid ``size x size``: ``[B, size^2, d], t -> [B, size^2, d]``."""

    def __init__(self, dim: int, heads: int, size: int, window: int, shift: int, mlp_ratio: float, eps: float):
        super().__init__()
        self.size = size
        self.window = min(window, size)  # upstream's set_shift_and_window_size
        self.shift = 0 if size <= self.window else shift
        self.attention = WindowAttention(dim, heads, self.window)
        self.layernorm_before = ConditionalLayerNorm(dim, eps)
        self.intermediate = _Dense(dim, int(mlp_ratio * dim))
        self.output = _Dense(int(mlp_ratio * dim), dim)
        self.layernorm_after = ConditionalLayerNorm(dim, eps)
        mask = shift_mask(size, self.window, self.shift) if self.shift else None
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x: Tensor, time: Tensor) -> Tensor:
        b, n, d = x.shape
        h = x.view(b, self.size, self.size, d)
        if self.shift:
            h = torch.roll(h, shifts=(-self.shift, -self.shift), dims=(1, 2))
        h = self.attention(partition(h, self.window).view(-1, self.window * self.window, d), self.attn_mask)
        h = unpartition(h.view(-1, self.window, self.window, d), self.window, self.size, self.size)
        if self.shift:
            h = torch.roll(h, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + self.layernorm_before(h.reshape(b, n, d), time)
        return x + self.layernorm_after(self.output.dense(F.gelu(self.intermediate.dense(x))), time)


class PatchMerging(nn.Module):
    """``[B, s^2, d] -> [B, (s/2)^2, 2d]``: each 2x2 block of tokens concatenated and projected."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = ConditionalLayerNorm(2 * dim, eps)

    def forward(self, x: Tensor, size: int, time: Tensor) -> Tensor:
        b, _, d = x.shape
        x = x.view(b, size, size, d)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.norm(self.reduction(x.view(b, -1, 4 * d)), time)


class PatchUnmerging(nn.Module):
    """``[B, s^2, d] -> [B, (2s)^2, d/2]``: each token projected to a 2x2 block of tokens."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.upsample = nn.Linear(dim, 2 * dim, bias=False)
        self.mixup = nn.Linear(dim // 2, dim // 2, bias=False)
        self.norm = ConditionalLayerNorm(dim // 2, eps)

    def forward(self, x: Tensor, size: int, time: Tensor) -> Tensor:
        b, _, d = x.shape
        x = self.upsample(x).reshape(b, size, size, 2, 2, d // 2).permute(0, 1, 3, 2, 4, 5)
        return self.mixup(self.norm(x.reshape(b, 4 * size * size, d // 2), time))


class Stage(nn.Module):
    """``depth`` Swin-v2 blocks (shifted windows on odd ones; the decoder's in reverse order) and a resampling."""

    def __init__(self, dim: int, heads: int, size: int, depth: int, window: int, mlp_ratio: float, eps: float,
                 decoder: bool, resample: bool):
        super().__init__()
        order = reversed(range(depth)) if decoder else range(depth)
        self.blocks = nn.ModuleList(SwinBlock(dim, heads, size, window, (window // 2) * (i % 2), mlp_ratio, eps)
                                    for i in order)
        self.size = size
        if resample:  # upstream builds these norms with the default eps
            setattr(self, "upsample" if decoder else "downsample", (PatchUnmerging if decoder else PatchMerging)(dim))


class ConvNeXtBlock(nn.Module):
    """The skips' ConvNeXt block: ``[B, s^2, d], t -> [B, s^2, d]`` (7x7 depthwise conv, conditioned norm, MLP, layer
    scale ``weight``)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = ConditionalLayerNorm(dim, eps)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.weight = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: Tensor, time: Tensor) -> Tensor:
        b, n, d = x.shape
        s = math.isqrt(n)
        h = self.dwconv(x.view(b, s, s, d).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h, time))))
        return x + (self.weight * h).reshape(b, n, d)


class _Projection(nn.Module):
    def __init__(self, conv: nn.Module, mixup: nn.Module | None = None):
        super().__init__()
        self.projection = conv
        if mixup is not None:
            self.mixup = mixup


class _Embeddings(nn.Module):
    def __init__(self, channels: int, dim: int, patch: int, eps: float):
        super().__init__()
        self.patch_embeddings = _Projection(nn.Conv2d(channels, dim, kernel_size=patch, stride=patch))
        self.norm = ConditionalLayerNorm(dim, eps)


def _kept_frequencies(n: int, size: int) -> list[int]:
    """The positions in ``fftfreq(n)`` order of the frequencies ``-size/2 .. size/2 - 1`` (known from the shapes
    alone, so a compiled graph has no data-dependent mask)."""
    return [i for i in range(n) if -size / 2 <= (i if i <= (n - 1) // 2 else i - n) <= size / 2 - 1]


def fourier_resample(x: Tensor, size: int) -> Tensor:
    """``[B, C, n, n] -> [B, C, size, size]``: the band-limited interpolant, as upstream's ``ScOT._downsample`` (keep
    the frequencies ``-size/2 .. size/2 - 1``) and ``_upsample`` (zero-pad the centred spectrum) compute it."""
    n = x.shape[-1]
    if n == size:
        return x
    # the spectrum's real view [B, C, n, n, 2] between the FFTs: ONNX takes no indexing or padding of complex tensors
    # (docs/export.md), and the views cost nothing
    spectrum = torch.view_as_real(torch.fft.fft2(x, norm="forward"))
    if n > size:
        keep = torch.tensor(_kept_frequencies(n, size), device=x.device)
        spectrum = spectrum.index_select(2, keep).index_select(3, keep)
        return torch.fft.ifft2(torch.view_as_complex(spectrum.contiguous()), norm="forward").real
    pad = (size - n) // 2
    padded = F.pad(torch.fft.fftshift(spectrum, dim=(2, 3)), (0, 0, *(pad,) * 4))
    return torch.fft.ifft2(torch.fft.ifftshift(torch.view_as_complex(padded.contiguous()), dim=(2, 3)),
                           norm="forward").real


class ScOTNet(nn.Module):
    """``[B, C_in, n, n], t [B] -> [B, C_out, n, n]`` (any even ``n``: resampled to ``image_size`` and back)."""

    def __init__(self, in_channels: int, out_channels: int, image_size: int = 128, patch_size: int = 4,
                 embed_dim: int = 48, depths=(4, 4, 4, 4), num_heads=(3, 6, 12, 24), skip_connections=(2, 2, 2, 0),
                 window_size: int = 16, mlp_ratio: float = 4.0, eps: float = 1e-5):
        super().__init__()
        self.image_size, self.in_channels = image_size, in_channels
        grid = image_size // patch_size
        levels = len(depths)
        self.embeddings = _Embeddings(in_channels, embed_dim, patch_size, 1e-5)  # upstream: the default eps
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(
            Stage(embed_dim * 2**i, num_heads[i], grid // 2**i, depths[i], window_size, mlp_ratio, eps,
                  decoder=False, resample=i < levels - 1) for i in range(levels))
        self.decoder = nn.Module()
        self.decoder.layers = nn.ModuleList(
            Stage(embed_dim * 2**i, num_heads[i], grid // 2**i, depths[i], window_size, mlp_ratio, eps,
                  decoder=True, resample=i > 0) for i in reversed(range(levels)))
        self.patch_recovery = _Projection(
            nn.ConvTranspose2d(embed_dim, out_channels, kernel_size=patch_size, stride=patch_size),
            nn.Conv2d(out_channels, out_channels, kernel_size=5, stride=1, padding=2, bias=False))
        self.residual_blocks = nn.ModuleList(
            nn.ModuleList(ConvNeXtBlock(embed_dim * 2**i, eps) for _ in range(n)) if n > 0
            else nn.ModuleList([nn.Identity()]) for i, n in enumerate(skip_connections))

    @torch.no_grad()
    def init_weights(self, std: float = 0.02) -> None:
        """A fresh network as transformers 4.29.2's ``Swinv2PreTrainedModel._init_weights`` leaves upstream's: every
        Linear and Conv2d weight ``N(0, std^2)`` with zero bias (the transposed convolution keeps torch's)."""
        if self.embeddings.norm.weight.weight.is_meta:
            return  # shapes only: nothing to draw
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                module.weight.normal_(0.0, std)
                if module.bias is not None:
                    module.bias.zero_()

    def stages(self, x: Tensor, time: Tensor, run=None) -> list[Tensor]:
        """Every stage's output tokens, the encoder's (before merging) then the decoder's (after its blocks, before
        unmerging): ``2 L`` tensors ``[B, s_i^2, d_i]``; the last is what the recovery reads. ``x [B, C, n0, n0]`` at
        the model's grid; ``run(block, h, time)`` runs a block (gradient checkpointing), default a plain call."""
        run = run or (lambda block, h, t: block(h, t))
        h = self.embeddings.norm(self.embeddings.patch_embeddings.projection(x).flatten(2).transpose(1, 2), time)
        skips = []
        for stage in self.encoder.layers:
            start = h
            for block in stage.blocks:
                h = run(block, h, time)
            skips.append(h)
            if hasattr(stage, "downsample"):
                h = stage.downsample(h + start, stage.size, time)
        for i, blocks in enumerate(self.residual_blocks[: len(skips)]):
            for block in blocks:
                if not isinstance(block, nn.Identity):
                    skips[i] = block(skips[i], time)
        outs, h = [], skips[-1]
        for i, stage in enumerate(self.decoder.layers):
            if i:
                h = h + skips[len(skips) - 1 - i]
            for block in stage.blocks:
                h = run(block, h, time)
            outs.append(h)
            if hasattr(stage, "upsample"):
                h = stage.upsample(h, stage.size, time)
        return skips + outs

    def recover(self, tokens: Tensor) -> Tensor:
        """``[B, s^2, d] -> [B, C_out, n0, n0]``: the transposed patch convolution and the 5x5 mixing."""
        b, n, d = tokens.shape
        s = math.isqrt(n)
        return self.patch_recovery.mixup(self.patch_recovery.projection(tokens.transpose(1, 2).reshape(b, d, s, s)))

    def forward(self, x: Tensor, time: Tensor, run=None) -> Tensor:
        n = x.shape[-1]
        out = self.recover(self.stages(fourier_resample(x, self.image_size), time, run)[-1])
        return fourier_resample(out, n)


def parameter_count(in_channels: int, out_channels: int, embed_dim: int, depths, num_heads, skip_connections,
                    patch_size: int = 4, mlp_ratio: float = 4.0) -> int:
    """The parameters of :class:`ScOTNet` at these sizes, by formula (checked against the built network)."""
    def norm(d):
        return 4 * d

    def block(d, heads):
        attn = heads + (2 * 512 + 512) + 512 * heads + 3 * d * d + 2 * d + d * d + d
        mlp = int(mlp_ratio * d) * d + int(mlp_ratio * d) + int(mlp_ratio * d) * d + d
        return attn + mlp + 2 * norm(d)

    total = in_channels * embed_dim * patch_size**2 + embed_dim + norm(embed_dim)
    levels = len(depths)
    for i in range(levels):
        d = embed_dim * 2**i
        total += 2 * depths[i] * block(d, num_heads[i])
        if i < levels - 1:
            total += 4 * d * 2 * d + norm(2 * d)  # merging
        if i > 0:
            total += d * 2 * d + (d // 2) ** 2 + norm(d // 2)  # unmerging
        total += skip_connections[i] * (d * 49 + d + norm(d) + 2 * 4 * d * d + 4 * d + d + d)
    return total + embed_dim * out_channels * patch_size**2 + out_channels + out_channels**2 * 25

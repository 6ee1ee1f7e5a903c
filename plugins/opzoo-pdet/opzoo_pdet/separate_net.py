"""PDE-Transformer, separate channels: the network of ``pdetransformer`` 0.1.11's
``core/separate_channels/pde_transformer.py`` (``PDEImpl`` without carrier tokens, as the published checkpoints were
trained), written for opzoo. ``[B, C, T, H, W] -> [B, C, T, H, W]``: every physical channel is its own stack of
tokens (its ``T`` frames embedded together), conditioned on its own labels, and each block mixes within an 8x8 window
(per channel), then across the channels at each token, then per token:

    h = h + (1 + g1) * A_window(LN1(h) (1 + s1) + b1)            # per channel, as the mixed-channel network
    h = h + (1 + g2) * A_channel(LN2(h) (1 + s2) + b2)           # cosine attention over the channels of a token
    h = h + (1 + g3) * MLP(LN3(h) (1 + s3) + b3)

with the nine modulation terms from ``Linear(SiLU(e))`` and ``e = TimestepEmbed(1000 t) + ChannelType(c) +
PdeType(p) + Task(k)`` per channel. Upstream also embeds the simulation time, the time step and the PDE parameters,
and multiplies those three by 0.0 (``SIMULATION_TIME_SCALING`` and the others): their weights are kept (the
checkpoints hold them) but not computed. The U-shape, the shifted windows and the final layer are the mixed-channel
network's (``mixed_net``), with every level's width ``D * 2^i``.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import mixed_net
from .mixed_net import (
    LOGIT_SCALE_MAX,
    FinalLayer,
    LabelEmbedding,
    Mlp,
    Modulation,
    Resample,
    TimestepEmbedding,
    stage_names,
    u_shape_features,
)


def windows(x: Tensor, size: int) -> Tensor:
    """``[B, C, H, W, D] -> [B * H/size * W/size, C, size*size, D]``: windows batch-major, then row-major."""
    b, c, h, w, d = x.shape
    x = x.view(b, c, h // size, size, w // size, size, d).permute(0, 2, 4, 1, 3, 5, 6)
    return x.reshape(-1, c, size * size, d)


def unwindows(x: Tensor, size: int, h: int, w: int) -> Tensor:
    """The inverse of :func:`windows`: ``[B * n_windows, C, size*size, D] -> [B, C, H, W, D]``."""
    c, d = x.shape[1], x.shape[-1]
    x = x.view(-1, h // size, w // size, c, size, size, d).permute(0, 3, 1, 4, 2, 5, 6)
    return x.reshape(-1, c, h, w, d)


class PdeParameterEmbedding(nn.Module):
    """Upstream's PDE-parameter embedder: its weights, kept so that checkpoints load; upstream scales its output by
    0.0, so it is never computed here."""

    def __init__(self, dim: int, num_classes: int, frequencies: int = 256):
        super().__init__()
        self.class_embedder = nn.Module()
        self.class_embedder.embedding_table = nn.Embedding(num_classes, dim)
        self.mlp_combined = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.mlp_timestep = nn.Sequential(nn.Linear(frequencies, dim), nn.SiLU(), nn.Linear(dim, dim))


class WindowAttention(mixed_net.WindowAttention):
    """The mixed-channel window attention per channel, ``[B', C, N, D] -> [B', C, N, D]``. Its mask is added to rows
    ``(window, channel)`` viewed as ``(row // n_windows, row % n_windows)``, as upstream does: with several channels
    that is not each row's own window, and it is kept."""

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        b, c, n, d = x.shape
        return super().forward(x.reshape(b * c, n, d), mask).view(b, c, n, d)


class ChannelAttention(nn.Module):
    """Cosine attention across the channels of each token, ``[B', N, C, D] -> [B', N, C, D]``, no position
    embedding and no output projection."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))

    def forward(self, x: Tensor) -> Tensor:
        b, p, n, d = x.shape
        q, k, v = (t.view(b, p, n, self.heads, d // self.heads).transpose(2, 3) for t in self.to_qkv(x).chunk(3, -1))
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=LOGIT_SCALE_MAX).exp()
        return (attn.softmax(dim=-1) @ v).transpose(2, 3).reshape(b, p, n, d)


class Block(nn.Module):
    """One block on windows ``[B * n_windows, C, N, D]``, conditioned on ``e [B, C, D]``."""

    def __init__(self, dim: int, heads: int, window: int, mlp_ratio: float):
        super().__init__()
        self.attn_spatial = WindowAttention(dim, heads, window)
        self.attn_channel = ChannelAttention(dim, heads)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.adain_2 = Modulation(dim, 9)

    def forward(self, x: Tensor, e: Tensor, mask: Tensor | None) -> Tensor:
        batch, c, dim = e.shape
        per_window = x.shape[0] // batch
        terms = [t.view(batch, c, 1, dim).repeat_interleave(per_window, dim=0) for t in self.adain_2(e.reshape(-1, dim))]
        b1, s1, g1, b2, s2, g2, b3, s3, g3 = terms
        x = x + (1 + g1) * self.attn_spatial(self.norm1(x) * (1 + s1) + b1, mask)
        h = (self.norm2(x) * (1 + s2) + b2).transpose(1, 2)
        x = x + (1 + g2) * self.attn_channel(h).transpose(1, 2)
        return x + (1 + g3) * self.mlp(self.norm3(x) * (1 + s3) + b3)


class Stage(mixed_net.Stage):
    """The mixed-channel stage on ``[B, C, D, H, W]``: windows per channel (``[B * n_windows, C, N, D]``), and
    pdetransformer's separate stage masks every non-periodic grid, however small."""

    block_class = Block
    mask_small_grids = True

    windows = staticmethod(windows)
    unwindows = staticmethod(unwindows)

    def region_ids(self, region: Tensor) -> Tensor:
        return self.windows(region[None, None, :, :, None], self.window)[:, 0, :, 0]


class SeparateChannelNet(nn.Module):
    """``[B, C, T, H, W] -> [B, C, T, H, W]`` (any ``C``; ``H, W`` multiples of ``patch_size * 2^levels``); see the
    module docstring. Parameter names are pdetransformer's separate-channel ``PDEImpl``'s."""

    def __init__(self, num_timesteps: int, hidden_size: int, depth: Sequence[int], num_heads: int,
                 window_size: int = 8, patch_size: int = 4, mlp_ratio: float = 4.0, num_classes: int = 1000,
                 class_dropout_prob: float = 0.1, periodic: bool = False):
        super().__init__()
        if len(depth) % 2 != 1:
            raise ValueError(f"depth {list(depth)}: an odd number of stages (encoder, latent, decoder)")
        self.levels = levels = len(depth) // 2
        self.patch_size, self.num_timesteps, self.num_classes = patch_size, num_timesteps, num_classes
        dims = [hidden_size * 2**i for i in range(levels + 1)]

        def stage(dim: int, n: int) -> Stage:
            return Stage(dim, n, num_heads, window_size, mlp_ratio, periodic)

        self.x_embedder = nn.Module()
        self.x_embedder.proj = nn.Conv2d(num_timesteps, hidden_size, patch_size, stride=patch_size)
        for i, dim in enumerate(dims):
            setattr(self, f"t_embedder_{i}", TimestepEmbedding(dim))
            setattr(self, f"simulation_time_embedder_{i}", TimestepEmbedding(dim))  # scaled by 0.0 upstream
            setattr(self, f"simulation_dt_embedder_{i}", TimestepEmbedding(dim))  # scaled by 0.0 upstream
            setattr(self, f"channel_type_embedder_{i}", LabelEmbedding(num_classes, dim, class_dropout_prob))
            setattr(self, f"pde_type_embedder_{i}", LabelEmbedding(num_classes, dim, class_dropout_prob))
            setattr(self, f"pde_parameter_embedder_{i}", PdeParameterEmbedding(dim, num_classes))
            setattr(self, f"task_embedder_{i}", LabelEmbedding(num_classes, dim, 0.0))
        for i in range(levels):
            setattr(self, f"encoder_level_{i}", stage(dims[i], depth[i]))
            setattr(self, f"down{i}_{i + 1}", Resample(dims[i], dims[i] // 2, nn.PixelUnshuffle(2)))
        self.latent = stage(dims[levels], depth[levels])
        self.up1_0 = Resample(dims[1], 2 * dims[1], nn.PixelShuffle(2))
        self.reduce_chan_level0 = nn.Conv2d(dims[1], dims[1], 1)
        self.decoder_level_0 = stage(dims[1], depth[levels + 1])
        for i in range(1, levels):
            setattr(self, f"up{i + 1}_{i}", Resample(dims[i + 1], 2 * dims[i + 1], nn.PixelShuffle(2)))
            setattr(self, f"reduce_chan_level{i}", nn.Conv2d(dims[i + 1], dims[i], 1))
            setattr(self, f"decoder_level_{i}", stage(dims[i], depth[levels + i + 1]))
        self.output = nn.Conv2d(dims[1], dims[1], 3, padding=1)
        self.final_layer = FinalLayer(dims[1], num_timesteps * patch_size * patch_size)

    @property
    def size_multiple(self) -> int:
        return self.patch_size * 2**self.levels

    def embeddings(self, t: Tensor, channel_type: Tensor, pde_type: Tensor, task: Tensor) -> list[Tensor]:
        """``e_i [B, C, D_i]`` per level from ``[B, C]`` diffusion times in [0, 1] and labels."""
        b, c = channel_type.shape
        out = []
        for i in range(self.levels + 1):
            e = getattr(self, f"t_embedder_{i}")(1000.0 * t.reshape(-1))
            e = e + getattr(self, f"channel_type_embedder_{i}")(channel_type.reshape(-1))
            e = e + getattr(self, f"pde_type_embedder_{i}")(pde_type.reshape(-1))
            out.append((e + getattr(self, f"task_embedder_{i}")(task.reshape(-1))).view(b, c, -1))
        return out

    @property
    def stage_names(self) -> list[str]:
        return stage_names(self.levels)

    def features(self, x: Tensor, e: list[Tensor], keep: Sequence[int] = (), run=None) -> tuple[Tensor, list[Tensor]]:
        """``[B, C, T, H, W] -> ([B, C, D_1, H/p, W/p]`` after the last decoder stage, the outputs of the stages
        ``keep`` (indices into :attr:`stage_names`)); ``run(stage, x, e)`` calls each stage (e.g. checkpointed)."""
        b, c = x.shape[:2]

        def per_channel(module: nn.Module, y: Tensor) -> Tensor:  # [B, C, D, H, W] through a 2D layer
            y = module(y.reshape(b * c, *y.shape[2:]))
            return y.view(b, c, *y.shape[1:])

        return u_shape_features(self, x, e, keep, run, per_channel, cat_dim=2)

    def head(self, h: Tensor, e1: Tensor) -> Tensor:
        """``[B, C, D_1, H/p, W/p] -> [B, C, T, H, W]``: Conv3x3, the final layer conditioned on ``e_1``, unpatchify."""
        b, c, _, hp, wp = h.shape
        p = self.patch_size
        y = self.final_layer(self.output(h.reshape(b * c, *h.shape[2:])), e1.reshape(b * c, -1))
        y = y.permute(0, 2, 3, 1).reshape(b * c, hp, wp, p, p, self.num_timesteps)
        return y.permute(0, 5, 1, 3, 2, 4).reshape(b, c, self.num_timesteps, hp * p, wp * p)

    def forward(self, x: Tensor, t: Tensor, channel_type: Tensor, pde_type: Tensor, task: Tensor) -> Tensor:
        """``x [B, C, T, H, W]``; ``t``, ``channel_type``, ``pde_type``, ``task``: ``[B, C]``."""
        e = self.embeddings(t, channel_type, pde_type, task)
        return self.head(self.features(x, e)[0], e[1])

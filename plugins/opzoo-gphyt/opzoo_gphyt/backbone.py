"""The General Physics Transformer as an opzoo backbone: physical fields in and out.

``forward(x: [B, H, W, T_in, C]) -> [B, H, W, 1, C]``. Around the network (:class:`opzoo_gphyt.network.GPhyTNet`):

1. with ``normalization="stats"`` (the default, as the published weights were trained: ``use_normalization: true``)
   each field is z-scored by its data's statistics ``field_mean``/``field_std`` (upstream's ``stats.yaml`` per
   dataset; for a user's file, its training split's, which opzoo's fit computes): ``(x - mean) / (max(std, 1e-4) +
   1e-6)``, as upstream's ``WellDataset`` (``min_std`` 1e-4), and the prediction brought back; with
   ``normalization="instance"`` each sample's channels are standardized by their own mean and standard deviation over
   the window (upstream's other mode, ``PhysicsDataset.normalize_data``: ``(x - mean) / (std + 1e-6)``, the unbiased
   std); ``"none"``: the network sees the fields as given;
2. the frames first, ``[B, T, H, W, C]``;
3. one step of the integrator (``integrator``, ``step_size``) on the network's time derivative; the last frame.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Optional

import torch
from torch import Tensor

import opzoo

from .network import INTEGRATORS, GPhyTNet


@dataclasses.dataclass
class GPhyTConfig(opzoo.ModelConfig):
    """GPhyT's sizes (defaults: GPhyT-S, as the published checkpoints were trained)."""

    in_channels: int = 5
    out_channels: int = 5
    in_timesteps: int = 4
    out_timesteps: int = 1
    spatial_dims: int = 2
    img_size: tuple[int, ...] = (256, 128)
    hidden_dim: int = 192
    mlp_dim: int = 768
    num_heads: int = 3
    num_layers: int = 12
    patch_size: tuple[int, ...] = (1, 16, 16)  # (time, height, width)
    use_derivatives: bool = True
    integrator: Literal["Euler", "Heun", "RK4", "none"] = "Euler"
    step_size: float = 1.0
    dropout: float = 0.0
    normalization: Literal["stats", "instance", "none"] = "stats"
    field_mean: Optional[tuple[float, ...]] = None  # per channel: its data's statistics (normalization="stats")
    field_std: Optional[tuple[float, ...]] = None

    per_channel_fields = ("field_mean", "field_std")

    def validate(self, source: str = "model_args") -> None:
        if self.in_channels != self.out_channels or self.out_timesteps != 1 or self.spatial_dims != 2:
            raise opzoo.ConfigError(f"{source}: GPhyT steps its own 2-D fields forward: in_channels = out_channels, "
                                    f"out_timesteps = 1, spatial_dims = 2, got {self.in_channels} -> "
                                    f"{self.out_channels} channels, {self.out_timesteps} steps, {self.spatial_dims}-D")
        if len(self.img_size) != 2 or len(self.patch_size) != 3:
            raise opzoo.ConfigError(f"{source}: img_size is (H, W) and patch_size (time, height, width), got "
                                    f"{list(self.img_size)} and {list(self.patch_size)}")
        grid = (self.in_timesteps, *self.img_size)
        bad = [f"{n} by {p}" for n, p in zip(grid, self.patch_size) if n % p]
        if bad:
            raise opzoo.ConfigError(f"{source}: the window x grid {list(grid)} does not divide into patches "
                                    f"{list(self.patch_size)} ({', '.join(bad)})")
        if self.hidden_dim % self.num_heads:
            raise opzoo.ConfigError(f"{source}.hidden_dim: {self.hidden_dim} is not divisible by the "
                                    f"{self.num_heads} heads")
        if self.integrator not in INTEGRATORS:
            raise opzoo.ConfigError(f"{source}.integrator: one of {', '.join(INTEGRATORS)}, got {self.integrator!r}")
        opzoo.kit.check_field_statistics(self, source, zero_std=True)  # upstream adds its own epsilon

    @property
    def tokens(self) -> tuple[int, int, int]:
        return tuple(n // p for n, p in zip((self.in_timesteps, *self.img_size), self.patch_size))  # type: ignore


class GPhyT(opzoo.Backbone):
    """``[B, H, W, T_in, C] -> [B, H, W, 1, C]`` around :class:`GPhyTNet`."""

    config_class = GPhyTConfig
    supports_grad_checkpointing = True
    no_weight_decay_keys = ("net.pos_embed",)
    channel_pad_value = 0.0
    MIN_STD = 1e-4  # upstream's WellDataset(min_std=1e-4): stds are clipped below at this

    def __init__(self, config: GPhyTConfig):
        super().__init__(config)
        config.validate("model_args")
        c = config
        self.net = GPhyTNet(fields=c.in_channels, dim=c.hidden_dim, mlp_dim=c.mlp_dim, heads=c.num_heads,
                            layers=c.num_layers, patch=tuple(c.patch_size), tokens=c.tokens,
                            use_derivatives=c.use_derivatives, integrator=c.integrator, dropout=c.dropout)

    def _name(self) -> str:
        return self.preset_name or "gphyt"

    def _frames(self, x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
        """``[B, H, W, T, C]`` physical -> ``[B, T, H, W, C]`` as the network takes it, and the statistics."""
        c = self.config
        want = (c.img_size[0], c.img_size[1], c.in_timesteps, c.in_channels)
        if x.ndim != 5 or tuple(x.shape[1:]) != want:
            raise ValueError(f"{self._name()} expects [B, H={want[0]}, W={want[1]}, T_in={want[2]}, C={want[3]}] (its "
                             f"position table is for that grid and window), got {list(x.shape)}")
        frames = x.permute(0, 3, 1, 2, 4)
        if c.normalization == "none":
            return frames, None
        if c.normalization == "stats":
            if c.field_mean is None:
                raise opzoo.ConfigError(f"{self._name()} z-scores each field by its data's statistics, as its weights were "
                                 f"trained (normalization='stats'), and has none: give field_mean and field_std (one "
                                 f"per channel), let opzoo compute them from a file's training split (opzoo eval, "
                                 f"finetune), or choose normalization='instance'")
            mean = torch.tensor(c.field_mean, dtype=x.dtype, device=x.device)
            std = torch.tensor(c.field_std, dtype=x.dtype, device=x.device).clamp_min(self.MIN_STD) + 1e-6
            return (frames - mean) / std, (mean, std)
        mean = frames.mean(dim=(1, 2, 3), keepdim=True)
        std = frames.std(dim=(1, 2, 3), keepdim=True) + 1e-6
        return (frames - mean) / std, (mean, std)

    def _physical(self, y: Tensor, stats) -> Tensor:
        if stats is not None:
            y = y * stats[1] + stats[0]
        return y.permute(0, 2, 3, 1, 4)

    def _checkpoint_fn(self):
        return self.checkpointed if self.grad_checkpointing and torch.is_grad_enabled() else None

    def forward(self, x: Tensor) -> Tensor:
        frames, stats = self._frames(x)
        return self._physical(self.net(frames, self.config.step_size, self._checkpoint_fn()), stats)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, H, W, T_in, C] -> [B, T', H', W', d]``: the tokens after the last block, for the input as given
        (the integrator's later stages evaluate the network again at other states)."""
        frames, _ = self._frames(x)
        return self.net.blocks_out(self.net.tokens(frames), self._checkpoint_fn())

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, T', H', W', d] -> [B, H, W, 1, C]``: the derivative from the features, then the integrator's step
        from ``x`` (Heun and RK4 evaluate the network at their further stages), so ``x`` is needed."""
        if x is None:
            raise ValueError(f"{self._name()}.forward_head needs x: the integrator steps from the input frames")
        frames, stats = self._frames(x)
        out = self.net.step(frames, self.net.fields(features), self.config.step_size, self._checkpoint_fn())
        return self._physical(out[:, -1:], stats)

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The tokens ``[B, T', H', W', d]`` after the blocks ``indices`` (the derivative's first evaluation)."""
        keep = set(self.block_indices(indices, len(self.net.blocks)))
        frames, _ = self._frames(x)
        h = self.net.tokens(frames)
        shape, kept = h.shape, []
        h = h.reshape(shape[0], -1, shape[-1])
        for i, block in enumerate(self.net.blocks):
            h = block(h)
            if i in keep:
                kept.append(h.reshape(shape))
        h = h.reshape(shape)
        return kept if intermediates_only else (h, kept)

    def group_matcher(self) -> dict:
        return {"stem": r"^net\.(?:tokenize|pos_embed)", "blocks": r"^net\.blocks\.(\d+)\."}

    @classmethod
    def io_layout(cls, old: GPhyTConfig, new: GPhyTConfig) -> dict | None:
        """For fine-tuning: the patch convolution reads ``[x, d_t x, d_h x, d_w x]`` (4 groups of the channels, new
        ones start at zero), the transposed one writes the channels; another grid interpolates the position table.
        Another window is not adapted (the table has a row per frame)."""
        if old.in_timesteps != new.in_timesteps or old.patch_size != new.patch_size:
            return None
        groups = 4 if new.use_derivatives else 1
        layout: dict = {
            "net.tokenize.weight": [opzoo.DimMap(1, opzoo.time_channel_index(groups, new.in_channels, groups,
                                                                             old.in_channels), "zero")],
            "net.detokenize.weight": [opzoo.DimMap(1, opzoo.time_channel_index(1, new.out_channels, 1,
                                                                               old.out_channels))],
            "net.detokenize.bias": [opzoo.DimMap(0, opzoo.time_channel_index(1, new.out_channels, 1,
                                                                             old.out_channels))],
        }
        if tuple(old.img_size) != tuple(new.img_size):
            layout["net.pos_embed"] = "resize"
        return layout

"""The Well's four architectures as opzoo backbones that take and return physical fields (docs/models.md §7).

``forward(x: [B, *S, T_in, C]) -> [B, *S, 1, C]`` with the channels ``fields + constant_fields``.
Inside, exactly what The Well's trainer does at evaluation (``Trainer.rollout_model(train=False)``):

1. z-score the time-varying channels of every input frame with the dataset's ``mean``/``std`` and the
   constant channels (taken from the last frame) with theirs (stds clipped below at ``min_denom``);
2. format as ``DefaultChannelsFirstFormatter``: time folded into channels, ``(t c)`` with ``t``
   outer, the constant channels appended, then ``nan_to_num``;
3. run the network (channels-first);
4. undo the normalization of the output: ``y * std + mean`` for a ``full`` target, or
   ``y * std_delta + mean_delta`` added to the last input frame for a ``delta`` target;
5. append the constant channels unchanged, so that :meth:`rollout` can feed the output back.

With ``normalization="none"`` steps 1 and 4 are the identity (besides the delta's addition).
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Optional

import torch
from torch import Tensor, nn

import opzoo

from .fno_net import FNONet
from .unet_nets import UNetClassicNet, UNetConvNextNet


@dataclasses.dataclass
class WellConfig(opzoo.ModelConfig):
    """What every Well backbone shares: the data it speaks and how it was normalized."""

    in_channels: int = 1  # len(fields) + len(constant_fields), the opzoo channels in and out
    out_channels: int = 1
    in_timesteps: int = 4
    out_timesteps: int = 1
    fields: list[str] = dataclasses.field(default_factory=lambda: ["u"])
    constant_fields: list[str] = dataclasses.field(default_factory=list)
    spatial_dims: int = 2
    resolution: list[int] = dataclasses.field(default_factory=lambda: [64, 64])
    normalization: Literal["zscore", "none"] = "zscore"
    target: Literal["full", "delta"] = "full"
    mean: list[float] = dataclasses.field(default_factory=list)
    std: list[float] = dataclasses.field(default_factory=list)
    mean_delta: list[float] = dataclasses.field(default_factory=list)
    std_delta: list[float] = dataclasses.field(default_factory=list)
    constant_mean: list[float] = dataclasses.field(default_factory=list)
    constant_std: list[float] = dataclasses.field(default_factory=list)
    min_denom: float = 1e-4

    @property
    def dim_in(self) -> int:
        """Channels of The Well's network input: ``T_in * len(fields) + len(constant_fields)``."""
        return self.in_timesteps * len(self.fields) + len(self.constant_fields)

    @property
    def dim_out(self) -> int:
        return len(self.fields)

    def check(self) -> None:
        nv, nc = len(self.fields), len(self.constant_fields)
        if nv == 0:
            raise opzoo.ConfigError("fields: a Well model needs at least one time-varying field")
        if self.in_channels != nv + nc or self.out_channels != nv + nc:
            raise opzoo.ConfigError(f"in_channels/out_channels must both be len(fields) + len(constant_fields) = "
                                    f"{nv + nc}, got {self.in_channels}/{self.out_channels}")
        if self.out_timesteps != 1:
            raise opzoo.ConfigError(f"out_timesteps: The Well's models predict one step, got {self.out_timesteps}")
        if self.spatial_dims not in (1, 2, 3) or len(self.resolution) != self.spatial_dims:
            raise opzoo.ConfigError(f"resolution {self.resolution} does not have spatial_dims={self.spatial_dims} entries")
        if self.normalization == "zscore":
            lengths = {"mean": (self.mean, nv), "std": (self.std, nv), "constant_mean": (self.constant_mean, nc),
                       "constant_std": (self.constant_std, nc)}
            if self.target == "delta":
                lengths |= {"mean_delta": (self.mean_delta, nv), "std_delta": (self.std_delta, nv)}
            for key, (values, n) in lengths.items():
                if len(values) != n:
                    raise opzoo.ConfigError(f"{key}: {len(values)} values for {n} channels "
                                            f"({', '.join(self.fields if n == nv else self.constant_fields)})")


@dataclasses.dataclass
class WellPretrainedCfg(opzoo.PretrainedCfg):
    """The facts a Well checkpoint records beyond :class:`opzoo.PretrainedCfg`'s (see ``presets.pretrained_cfg``)."""

    constant_fields: Optional[list[str]] = None  # the fields that do not evolve, appended after the time-varying ones
    dataset: Optional[str] = None  # "The Well: <dataset>"
    target: Optional[str] = None  # what the network was trained to predict (full next step or delta)
    input_format: Optional[str] = None  # how frames become the network's channels (The Well's formatter)


class WellBackbone(opzoo.Backbone):
    """Physical fields in and out around one of The Well's networks (``self.net``, channels-first)."""

    config_class = WellConfig
    supports_grad_checkpointing = True
    pretrained_cfg_class = WellPretrainedCfg

    def __init__(self, config: WellConfig):
        super().__init__(config)
        config.check()
        c = config
        nv = len(c.fields)

        def stats(values: list[float], n: int, clip: bool) -> Tensor:
            t = torch.tensor(values if values else [0.0] * n, dtype=torch.float32)
            return t.clamp_min(c.min_denom) if clip else t

        normalize = c.normalization == "zscore"
        # not persistent: they are config, not weights, and The Well's state dicts do not have them
        self.register_buffer("mean", stats(c.mean if normalize else [0.0] * nv, nv, False), persistent=False)
        self.register_buffer("std", stats(c.std if normalize else [1.0] * nv, nv, normalize), persistent=False)
        nc = len(c.constant_fields)
        self.register_buffer("constant_mean", stats(c.constant_mean if normalize else [0.0] * nc, nc, False), persistent=False)
        self.register_buffer("constant_std", stats(c.constant_std if normalize else [1.0] * nc, nc, normalize), persistent=False)
        delta = normalize and c.target == "delta"
        self.register_buffer("mean_delta", stats(c.mean_delta if delta else [0.0] * nv, nv, False), persistent=False)
        self.register_buffer("std_delta", stats(c.std_delta if delta else [1.0] * nv, nv, delta), persistent=False)
        self.net = self.build_net(c)

    def build_net(self, config: WellConfig) -> nn.Module:
        raise NotImplementedError

    @property
    def size_multiple(self) -> int:
        """Every spatial size of an input must be a multiple of this (the U-Nets' down-sampling)."""
        return 1

    def format_input(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C]`` physical -> The Well's normalized network input ``[B, dim_in, *S]``."""
        c = self.config
        nv = len(c.fields)
        variable = (x[..., :nv] - self.mean) / self.std  # [B, *S, T, nv]
        b, *spatial, t, _ = variable.shape
        d = len(spatial)
        variable = variable.permute(0, d + 1, d + 2, *range(1, d + 1)).reshape(b, t * nv, *spatial)
        parts = [variable]
        if c.constant_fields:
            constant = (x[..., -1, nv:] - self.constant_mean) / self.constant_std  # [B, *S, nc]
            parts.append(constant.movedim(-1, 1))
        return torch.nan_to_num(torch.cat(parts, dim=1)).contiguous()

    def _net_input(self, x: Tensor) -> Tensor:
        c = self.config
        d = c.spatial_dims
        if x.ndim != d + 3 or tuple(x.shape[-2:]) != (c.in_timesteps, c.in_channels):
            names = ", ".join(c.fields + c.constant_fields)
            raise ValueError(f"{type(self).__name__} expects [B, {', '.join('XYZ'[:d])}, T_in={c.in_timesteps}, "
                             f"C={c.in_channels}] with channels ({names}), got {list(x.shape)}")
        return self.format_input(x)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C] -> [B, *S, F]``: the network's last hidden features (before its output layer),
        channels-last."""
        return self.net.features(self._net_input(x), (), self.checkpointed)[0].movedim(1, -1)

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, *S, F] -> [B, *S, 1, C]``: the output layer, then The Well's de-normalization. ``x`` is needed when
        the model predicts the difference to the last frame (``target='delta'``) or carries constant fields."""
        c = self.config
        nv = len(c.fields)
        if x is None and (c.target == "delta" or c.constant_fields):
            raise opzoo.ConfigError(f"{self.preset_name or type(self).__name__} predicts relative to its input "
                                    f"(target={c.target!r}, constant fields {c.constant_fields}): "
                                    "forward_head(features, x) needs the input x")
        y = self.net.head(features.movedim(-1, 1)).movedim(1, -1)  # [B, *S, nv], normalized
        if c.target == "delta":
            y = x[..., -1, :nv] + (y * self.std_delta + self.mean_delta)
        else:
            y = y * self.std + self.mean
        out = torch.cat([y, x[..., -1, nv:]], dim=-1) if c.constant_fields else y
        return out.unsqueeze(-2)

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The outputs of the network's blocks ``indices`` (FNO: its Fourier blocks; U-Nets: encoder levels, the
        bottleneck or neck, decoder levels), channels-last ``[B, *S', F']``."""
        keep = self.block_indices(indices, self.net.n_blocks)
        try:
            h, kept = self.net.features(self._net_input(x), keep, self.checkpointed)
        except ValueError as e:
            raise opzoo.ConfigError(f"{self.preset_name or type(self).__name__}: {e}") from None
        kept = [k.movedim(1, -1) for k in kept]
        return kept if intermediates_only else (h.movedim(1, -1), kept)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x), x)


@dataclasses.dataclass
class WellFnoConfig(WellConfig):
    """neuraloperator 0.3.0's FNO as The Well builds it (``modes3`` is used in 3D only)."""

    modes1: int = 16
    modes2: int = 16
    modes3: int = 16
    hidden_channels: int = 128
    n_layers: int = 4
    lifting_channels: int = 256
    projection_channels: int = 256
    factorization: Literal["dense", "tucker"] = "dense"
    rank: float = 1.0
    # "applied": the FNO as neuraloperator defines it (The Well from commit 21e51f6, PyPI 1.2.0);
    # "dropped": the blocks' output discarded, projection(lifting(x)), as the_well <= 1.1.0 trained the
    # published checkpoints (fno_net's docstring has the history)
    fourier_blocks: Literal["applied", "dropped"] = "applied"

    @property
    def modes(self) -> list[int]:
        if self.spatial_dims not in (2, 3):
            raise opzoo.ConfigError(f"spatial_dims: The Well's FNO/TFNO take 2 or 3, got {self.spatial_dims}")
        return [self.modes1, self.modes2, self.modes3][: self.spatial_dims]


@dataclasses.dataclass
class WellTfnoConfig(WellFnoConfig):
    factorization: Literal["dense", "tucker"] = "tucker"


class WellFNO(WellBackbone):
    """The Well's ``FNO`` (neuraloperator 0.3.0 ``FNO``, dense spectral weights)."""

    config_class = WellFnoConfig

    def group_matcher(self) -> dict:
        return {"stem": r"^net\.lifting\.", "blocks": r"^net\.(?:spectral|skips)\.(\d+)\."}

    def lora_targets(self) -> list[str]:
        """The blocks' pointwise skip convolutions (the spectral weights stay frozen); none where the blocks do not
        feed the output (``fourier_blocks: dropped``, as the published checkpoints were trained): refused."""
        if self.config.fourier_blocks == "dropped":
            raise opzoo.ConfigError(f"{self.preset_name or type(self).__name__} computes projection(lifting(x)): its "
                                    "blocks do not feed its output (fourier_blocks: dropped, as The Well <= 1.1.0 "
                                    "trained it), so adapters in them would learn nothing; fine-tune it with --tune "
                                    "head or --tune full")
        return super().lora_targets()

    def build_net(self, c: WellFnoConfig) -> nn.Module:
        return FNONet(c.dim_in, c.dim_out, c.modes, c.hidden_channels, c.n_layers, c.lifting_channels,
                      c.projection_channels, c.factorization, c.rank, apply_blocks=c.fourier_blocks == "applied")


class WellTFNO(WellFNO):
    """The Well's ``TFNO`` (neuraloperator 0.3.0 ``TFNO``: Tucker-factorized spectral weights, rank 1.0)."""

    config_class = WellTfnoConfig


@dataclasses.dataclass
class WellUNetClassicConfig(WellConfig):
    init_features: int = 32


class WellUNetClassic(WellBackbone):
    """The Well's ``UNetClassic``."""

    config_class = WellUNetClassicConfig

    def group_matcher(self) -> dict:
        """Encoder levels 1-4, the bottleneck, decoder levels 4-1 (each with its up-convolution); the head is the
        last convolution."""
        levels = ["encoder1", "encoder2", "encoder3", "encoder4", "bottleneck", "(?:upconv4|decoder4)",
                  "(?:upconv3|decoder3)", "(?:upconv2|decoder2)", "(?:upconv1|decoder1)"]
        return {"stem": r"^$", "blocks": [(rf"^net\.{level}\.", i) for i, level in enumerate(levels)]}

    def build_net(self, c: WellUNetClassicConfig) -> nn.Module:
        return UNetClassicNet(c.dim_in, c.dim_out, c.spatial_dims, c.init_features)

    @property
    def size_multiple(self) -> int:
        return 16


@dataclasses.dataclass
class WellUNetConvNextConfig(WellConfig):
    stages: int = 4
    blocks_per_stage: int = 1
    blocks_at_neck: int = 1
    init_features: int = 32


class WellUNetConvNext(WellBackbone):
    """The Well's ``UNetConvNext``."""

    config_class = WellUNetConvNextConfig

    def group_matcher(self) -> dict:
        """The input convolution, then the encoder stages, the neck and the decoder stages; the head is the output
        convolution."""
        n = self.config.stages
        return {"stem": r"^net\.in_proj\.", "blocks": [(rf"^net\.encoder\.{i}\.", i) for i in range(n)]
                + [(r"^net\.neck\.", n)] + [(rf"^net\.decoder\.{j}\.", n + 1 + j) for j in range(n)]}

    def build_net(self, c: WellUNetConvNextConfig) -> nn.Module:
        return UNetConvNextNet(c.dim_in, c.dim_out, c.spatial_dims, c.stages, c.blocks_per_stage,
                               c.blocks_at_neck, c.init_features)

    @property
    def size_multiple(self) -> int:
        return 2**self.config.stages


BACKBONES = {"well-fno": WellFNO, "well-tfno": WellTFNO, "well-unet-classic": WellUNetClassic,
             "well-unet-convnext": WellUNetConvNext}

"""The Fourier Neural Operator as an opzoo Backbone (Li et al. 2021; docs/models.md §5).

``[B, *S, T_in, C_in] -> [B, *S, T_out, C_out]``: the ``T_in`` frames of a point are flattened
with their ``len(S)`` grid coordinates and lifted by ``P`` (pointwise linear) to ``width``;
``depth`` layers ``h <- act(W h + K h)`` (no activation after the last layer, as in the reference
code and neuraloperator); projection ``Q`` = Linear(width -> 128), act, Linear(128 -> T_out*C_out).
The operator-learning presets use ``T_in = T_out = 1``: ``u0 [B, *S, 1, C] -> u(t) [B, *S, 1, C]``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

import opzoo

from .spectral_conv import SpectralConv

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}
ACTIVATION_MODULES = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}


@dataclasses.dataclass
class FnoConfig(opzoo.ModelConfig):
    """FNO hyper-parameters (defaults: fno-2d)."""

    in_channels: int = 1
    out_channels: int = 1
    in_timesteps: int = 1
    out_timesteps: int = 1
    spatial_dims: int = 2
    width: int = 64
    depth: int = 4
    modes: int = 12
    projection_dim: int = 128
    act: Literal["gelu", "relu", "silu"] = "gelu"


class FNO(opzoo.Backbone):
    """``[B, *S, T_in, C_in] -> [B, *S, T_out, C_out]`` with ``len(S) == spatial_dims``."""

    config_class = FnoConfig
    supports_grad_checkpointing = True

    def group_matcher(self) -> dict:
        return {"stem": r"^lift\.", "blocks": r"^(?:spectral|pointwise)\.(\d+)\."}

    def __init__(self, config: FnoConfig):
        super().__init__(config)
        c = config
        if c.spatial_dims not in (1, 2, 3):
            raise opzoo.ConfigError(f"spatial_dims: FNO supports 1, 2 or 3, got {c.spatial_dims}")
        self.act = ACTIVATIONS[c.act]
        self.lift = nn.Linear(c.in_timesteps * c.in_channels + c.spatial_dims, c.width)
        self.spectral = nn.ModuleList(SpectralConv(c.width, c.width, c.modes, c.spatial_dims) for _ in range(c.depth))
        self.pointwise = nn.ModuleList(nn.Linear(c.width, c.width) for _ in range(c.depth))
        self.project = nn.Sequential(
            nn.Linear(c.width, c.projection_dim), ACTIVATION_MODULES[c.act](),
            nn.Linear(c.projection_dim, c.out_timesteps * c.out_channels),
        )

    def _layer(self, i: int, h: Tensor) -> Tensor:
        h = self.spectral[i](h) + self.pointwise[i](h)
        return self.act(h) if i < self.config.depth - 1 else h

    def _layers(self, x: Tensor, keep=()) -> tuple[Tensor, list[Tensor]]:
        c = self.config
        d = c.spatial_dims
        if x.ndim != d + 3 or tuple(x.shape[-2:]) != (c.in_timesteps, c.in_channels):
            raise ValueError(
                f"FNO expects [B, {', '.join('XYZ'[:d])}, T_in={c.in_timesteps}, C={c.in_channels}], got {list(x.shape)}"
            )
        h = opzoo.append_grid(x.flatten(-2).unsqueeze(-2), time=False).squeeze(-2)  # [B, *S, T*C + d]
        h, kept = self.lift(h), []
        for i in range(c.depth):
            h = self.checkpointed(self._layer, i, h)
            if i in keep:
                kept.append(h)
        return h, kept

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C] -> [B, *S, width]``: the latent after the Fourier layers."""
        return self._layers(x)[0]

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, *S, width] -> [B, *S, T_out, C_out]``: the projection (``x`` is not needed)."""
        c = self.config
        return self.project(features).unflatten(-1, (c.out_timesteps, c.out_channels))

    def forward_intermediates(self, x: Tensor, indices=None, intermediates_only: bool = False):
        """The latents ``[B, *S, width]`` after the Fourier layers ``indices``."""
        h, kept = self._layers(x, self.block_indices(indices, self.config.depth))
        return kept if intermediates_only else (h, kept)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))

    @classmethod
    def io_layout(cls, old: FnoConfig, new: FnoConfig) -> dict:
        """For ``opzoo.training.adapt_model``: the lifting layer reads ``T_in*C`` time-major inputs then
        the ``d`` grid channels; the projection writes ``T_out*C`` rows."""
        lift = opzoo.time_channel_index(new.in_timesteps, new.in_channels, old.in_timesteps, old.in_channels)
        lift += tuple(old.in_timesteps * old.in_channels + j for j in range(new.spatial_dims))
        rows = opzoo.time_channel_index(new.out_timesteps, new.out_channels, old.out_timesteps, old.out_channels)
        return {
            "lift.weight": [opzoo.DimMap(1, lift, "zero")],
            "project.2.weight": [opzoo.DimMap(0, rows)],
            "project.2.bias": [opzoo.DimMap(0, rows)],
        }

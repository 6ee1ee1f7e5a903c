"""A minimal Backbone: pointwise lift, residual blocks of (Mixer, MLP), pointwise projection.

It exists so a model can be built, saved, loaded and run before any plugin is installed, and it
accepts any registered Mixer and Residual through its config.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from torch import Tensor, nn

from ..config import ModelConfig
from ..contracts.interfaces import Backbone
from ..layers.grid import append_grid
from ..layers.mlp import Mlp
from ..registry.registry import get_registry


@dataclasses.dataclass
class SimpleConfig(ModelConfig):
    spatial_dims: int = 2
    width: int = 32
    depth: int = 2
    mlp_ratio: float = 2.0
    mixer: str = "pointwise-mlp"
    mixer_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    residual: str = "plain"
    residual_args: dict[str, Any] = dataclasses.field(default_factory=dict)


class SimpleBlock(nn.Module):
    """Two sub-layers, each joined by its own Residual: ``u -> Mixer(LN(u))`` then ``u -> MLP(LN(u))``."""

    def __init__(self, cfg: SimpleConfig, index: int):
        super().__init__()
        registry = get_registry()
        residual_cls = registry.get("residual", cfg.residual)
        self.norm1 = nn.LayerNorm(cfg.width)
        self.mixer = registry.get("mixer", cfg.mixer)(cfg.width, **cfg.mixer_args)
        self.norm2 = nn.LayerNorm(cfg.width)
        self.mlp = Mlp(cfg.width, hidden_features=int(cfg.width * cfg.mlp_ratio))
        self.residual1 = residual_cls(cfg.width, index=2 * index, **cfg.residual_args)
        self.residual2 = residual_cls(cfg.width, index=2 * index + 1, **cfg.residual_args)

    def forward(self, state: Tensor) -> Tensor:
        state = self.residual1(state, lambda u: self.mixer(self.norm1(u)))
        return self.residual2(state, lambda u: self.mlp(self.norm2(u)))


class SimpleOperator(Backbone):
    """``[B, *S, T_in, C_in] -> [B, *S, T_out, C_out]`` for ``len(S) == spatial_dims``."""

    config_class = SimpleConfig
    supports_grad_checkpointing = True

    def group_matcher(self) -> dict:
        return {"stem": r"^(lift|streams)\b", "blocks": r"^blocks\.(\d+)\."}

    def __init__(self, config: SimpleConfig):
        super().__init__(config)
        c = config
        registry = get_registry()
        self.lift = nn.Linear(c.in_timesteps * (c.in_channels + c.spatial_dims + 1), c.width)
        self.streams = registry.get("residual", c.residual).stream_adapter(c.width, **c.residual_args)
        self.blocks = nn.ModuleList(SimpleBlock(c, i) for i in range(c.depth))
        self.norm = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, c.out_timesteps * c.out_channels)

    def _blocks(self, x: Tensor, keep: Sequence[int] = ()) -> tuple[Tensor, list[Tensor]]:
        c = self.config
        if x.ndim != c.spatial_dims + 3 or x.shape[-2:] != (c.in_timesteps, c.in_channels):
            raise ValueError(
                f"{type(self).__name__} expects [B, {', '.join('S' * c.spatial_dims)}, "
                f"{c.in_timesteps}, {c.in_channels}], got {list(x.shape)}"
            )
        state, kept = self.streams.expand(self.lift(append_grid(x).flatten(-2))), []
        for i, block in enumerate(self.blocks):
            state = self.checkpointed(block, state)
            if i in keep:
                kept.append(self.streams.collapse(state))
        return self.streams.collapse(state), kept

    def forward_features(self, x: Tensor) -> Tensor:
        """``[B, *S, T_in, C] -> [B, *S, width]``: the latent after the blocks."""
        return self._blocks(x)[0]

    def forward_head(self, features: Tensor, x: Tensor | None = None) -> Tensor:
        """``[B, *S, width] -> [B, *S, T_out, C_out]`` (``x`` is not needed)."""
        c = self.config
        return self.head(self.norm(features)).unflatten(-1, (c.out_timesteps, c.out_channels))

    def forward_intermediates(self, x: Tensor, indices: int | Sequence[int] | None = None,
                              intermediates_only: bool = False):
        """Per-block latents ``[B, *S, width]``."""
        z, kept = self._blocks(x, self.block_indices(indices, len(self.blocks)))
        return kept if intermediates_only else (z, kept)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))

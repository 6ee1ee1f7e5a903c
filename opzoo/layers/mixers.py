"""The core's one built-in Mixer, so that a model can be built before any plugin is installed."""

from __future__ import annotations

from torch import Tensor

from ..contracts.interfaces import Mixer
from .mlp import Mlp


class PointwiseMLPMixer(Mixer):
    """A per-token MLP (no spatial mixing): ``[B, *S, D] -> [B, *S, D]``."""

    def __init__(self, dim: int, mlp_ratio: float = 2.0):
        super().__init__()
        self.mlp = Mlp(dim, hidden_features=int(dim * mlp_ratio))

    def forward(self, x: Tensor) -> Tensor:
        return self.mlp(x)

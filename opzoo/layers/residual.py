"""The plain residual connection: the state is the latent itself, ``x + branch(x)``."""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from ..contracts.interfaces import Residual


class PlainResidual(Residual):
    """``forward(x [B, *S, D], branch) -> x + branch(x)``."""

    def __init__(self, dim: int, index: int = 0):
        super().__init__()
        self.dim, self.index = dim, index

    def forward(self, state: Tensor, branch: Callable[[Tensor], Tensor]) -> Tensor:
        return state + branch(state)

"""The POT backbone's two built-in block layouts, registered as ``dpot`` and ``sandwich``.

Each builds its parts with the :class:`~opzoo.PotParts` it is given (``parts.make_mixer()`` etc.), so the
mixer, feed-forward and residual are whatever the config names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from ..contracts.interfaces import Block

if TYPE_CHECKING:
    from .pot_parts import PotParts


class DpotBlock(Block):
    """DPOT's block, one sub-layer: ``state -> Residual(state, z -> FFN(GN2(F(GN1(z)))))``.

    ``F(u) = Mixer(u) + u``. With the plain residual and the ``mlp`` feed-forward this is
    ``y = x + MLP(GN2(F(GN1(x))))``.
    """

    sublayers = 1

    def __init__(self, parts: "PotParts", index: int):
        super().__init__()
        self.norm1 = parts.make_norm()
        self.mixer = parts.make_mixer()
        self.norm2 = parts.make_norm()
        self.mlp = parts.make_feedforward()
        self.residual = parts.make_residual(index)

    def branch(self, z: Tensor) -> Tensor:
        u = self.norm1(z)
        return self.mlp(self.norm2(self.mixer(u) + u))

    def forward(self, state: Any) -> Any:
        return self.residual(state, self.branch)


class SandwichBlock(Block):
    """Two sub-layers with sandwich norms, each joined by its own Residual (AOT-POT, docs/models.md §3).

    Branch 1 ``z -> post_norm1(Mixer(norm1(z)))``, branch 2 ``z -> post_norm2(FFN(norm2(z)))``;
    residual indices ``2*index`` and ``2*index + 1``.
    """

    sublayers = 2

    def __init__(self, parts: "PotParts", index: int):
        super().__init__()
        self.norm1 = parts.make_norm()
        self.mixer = parts.make_mixer()
        self.post_norm1 = parts.make_norm()
        self.norm2 = parts.make_norm()
        self.mlp = parts.make_feedforward()
        self.post_norm2 = parts.make_norm()
        self.residual1 = parts.make_residual(2 * index)
        self.residual2 = parts.make_residual(2 * index + 1)

    def mixer_branch(self, z: Tensor) -> Tensor:
        return self.post_norm1(self.mixer(self.norm1(z)))

    def mlp_branch(self, z: Tensor) -> Tensor:
        return self.post_norm2(self.mlp(self.norm2(z)))

    def forward(self, state: Any) -> Any:
        state = self.residual1(state, self.mixer_branch)
        return self.residual2(state, self.mlp_branch)


__all__ = ["DpotBlock", "SandwichBlock"]

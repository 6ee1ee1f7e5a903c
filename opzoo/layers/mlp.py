"""timm's ``Mlp`` (``timm.layers.Mlp``), the same modules in the same order, without importing timm.

Importing timm costs seconds at start-up (``timm.layers`` pulls in torchvision), and opzoo uses only
this block of it. Module names (``fc1``, ``act``, ``drop1``, ``norm``, ``fc2``, ``drop2``), parameter
shapes, initialization order and forward are timm's, so state dicts and seeded initial weights are
identical (tests/core/test_pot_components.py checks both against timm).
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor, nn


class Mlp(nn.Module):
    """``fc2(norm(drop(act(fc1(x)))))`` then dropout, over the last dim: ``[..., D_in] -> [..., D_out]``."""

    def __init__(self, in_features: int, hidden_features: int | None = None, out_features: int | None = None,
                 act_layer: Callable[[], nn.Module] = nn.GELU, bias: bool = True, drop: float = 0.0):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


__all__ = ["Mlp"]

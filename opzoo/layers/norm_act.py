"""Activations from DPOT's table and a channels-last GroupNorm, shared by the POT backbone and its sub-layers."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError

# DPOT's ACTIVATION table (official code), as classes
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "relu": nn.ReLU,
    "leaky_relu": nn.LeakyReLU, "softplus": nn.Softplus, "elu": nn.ELU, "silu": nn.SiLU,
}


def make_activation(name: str) -> nn.Module:
    """A fresh activation module from DPOT's table (``leaky_relu`` has slope 0.1, as in DPOT)."""
    if name not in ACTIVATIONS:
        raise ConfigError(f"act: unknown activation {name!r}; known: {', '.join(ACTIVATIONS)}")
    return nn.LeakyReLU(0.1) if name == "leaky_relu" else ACTIVATIONS[name]()


class ChannelsLastGroupNorm(nn.GroupNorm):
    """GroupNorm over a channels-last tensor: ``[B, *S, D] -> [B, *S, D]``."""

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x.movedim(-1, 1), self.num_groups, self.weight, self.bias, self.eps).movedim(1, -1)


__all__ = ["ACTIVATIONS", "make_activation", "ChannelsLastGroupNorm"]

"""The core's feed-forward sub-layer: the MLP of DPOT's and AOT-POT's blocks, registered as ``mlp``."""

from __future__ import annotations

from ..contracts.interfaces import FeedForward
from .mlp import Mlp
from .norm_act import make_activation


class MlpFeedForward(Mlp, FeedForward):
    """timm's ``Mlp`` (``fc2(act(fc1(x)))``) over channels-last tokens: ``[B, *S, D] -> [B, *S, D]``.

    DPOT's block MLP is a pair of 1x1 convs; over channels-last tokens that is this Mlp, with
    parameters ``fc1.{weight,bias}`` ``[hidden, D]``, ``[hidden]`` and ``fc2`` ``[D, hidden]``, ``[D]``.
    """

    def __init__(self, dim: int, hidden_dim: int, act: str = "gelu"):
        super().__init__(dim, hidden_features=hidden_dim, act_layer=lambda: make_activation(act))


__all__ = ["MlpFeedForward"]

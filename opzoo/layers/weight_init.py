"""timm's ``trunc_normal_`` (``timm.layers.trunc_normal_``), without importing timm (see opzoo.layers.mlp).

timm keeps PyTorch's original algorithm (uniform on the truncated CDF range, then the inverse normal
CDF); ``torch.nn.init.trunc_normal_`` has since changed how it draws, so seeded weights would differ.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


@torch.no_grad()
def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0) -> Tensor:
    """Fill ``tensor`` in place from N(mean, std²) truncated to the absolute bounds ``[a, b]``."""
    def norm_cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = norm_cdf((a - mean) / std), norm_cdf((b - mean) / std)
    tensor.uniform_(2 * lo - 1, 2 * hi - 1)
    tensor.erfinv_()
    tensor.mul_(std * math.sqrt(2.0))
    tensor.add_(mean)
    tensor.clamp_(min=a, max=b)
    return tensor


__all__ = ["trunc_normal_"]

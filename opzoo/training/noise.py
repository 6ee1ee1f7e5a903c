"""Auto-regressive denoising: Gaussian noise scaled by each sample's and channel's norm (docs/training.md)."""

from __future__ import annotations

import torch
from torch import Tensor


def denoising_noise(x: Tensor, scale: float, generator: torch.Generator | None = None, z: Tensor | None = None) -> Tensor:
    """``ε · ‖x_{b,c}‖₂ · randn`` with the norm over (S, T) per sample ``b`` and channel ``c``.

    x: ``[B, *S, T, C]`` -> noise of the same shape (DPOT's
    ``noise_scale * sum(xx**2, dim=(1..-2), keepdim=True)**0.5 * randn_like(xx)``). The draw comes
    from ``generator`` on the CPU so that it is identical on every device and rank.
    ``z`` (same shape as ``x``) replaces the draw: under DDP each rank passes its slice of one
    global-batch draw, so the noise does not depend on the number of ranks.
    """
    norm = x.float().square().sum(dim=tuple(range(1, x.ndim - 1)), keepdim=True).sqrt()
    if z is None:
        z = torch.randn(x.shape, generator=generator, dtype=torch.float32)
    return (scale * norm * z.to(x.device)).to(x.dtype)


def add_denoising_noise(x: Tensor, scale: float, generator: torch.Generator | None = None, z: Tensor | None = None) -> Tensor:
    """``x + denoising_noise(x)``; a no-op for ``scale == 0``. Use for training inputs only."""
    if scale == 0:
        return x
    return x + denoising_noise(x, scale, generator, z)

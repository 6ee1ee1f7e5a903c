"""Gaussian random fields on periodic grids (the initial conditions of the FNO datasets)."""

from __future__ import annotations

import math
from typing import Sequence

import torch


def wavenumbers(shape: Sequence[int], length: float = 1.0, rfft: bool = True, dtype=torch.float64) -> list[torch.Tensor]:
    """Angular wavenumbers ``2 pi k / length`` per axis, broadcastable to the (r)fft grid of ``shape``.

    Returns one tensor per axis, shaped ``[1, .., n_i, .., 1]``; the last axis is halved if ``rfft``.
    """
    d = len(shape)
    out = []
    for i, n in enumerate(shape):
        if rfft and i == d - 1:
            k = torch.fft.rfftfreq(n, d=length / n, dtype=dtype)
        else:
            k = torch.fft.fftfreq(n, d=length / n, dtype=dtype)
        view = [1] * d
        view[i] = k.numel()
        out.append((2 * math.pi * k).reshape(view))
    return out


def dealias_mask(shape: Sequence[int], dtype=torch.float64) -> torch.Tensor:
    """2/3-rule mask on the rfft grid of ``shape``: 1 where every integer wavenumber |k_i| <= (n_i - 1) // 3.

    Strictly below n/3, so a product of two kept modes never aliases onto a kept mode.
    Built from integer wavenumbers, so float32 and float64 keep the same modes.
    """
    d = len(shape)
    mask = torch.ones((), dtype=torch.bool)
    for i, n in enumerate(shape):
        k = torch.fft.rfftfreq(n, d=1.0 / n) if i == d - 1 else torch.fft.fftfreq(n, d=1.0 / n)
        view = [1] * d
        view[i] = k.numel()
        mask = mask & (k.round().abs() <= (n - 1) // 3).reshape(view)
    return mask.to(dtype)


def gaussian_random_field(
    shape: Sequence[int],
    alpha: float,
    tau: float,
    sigma: float | None = None,
    n: int = 1,
    length: float = 1.0,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``[n, *shape]`` zero-mean periodic GRF with covariance ``sigma^2 (-Laplacian + tau^2 I)^(-alpha)``.

    ``sigma`` defaults to ``tau^(alpha - d/2)`` as in FNO's ``GaussianRF``, and the marginal law is
    that of FNO's sampler (2 sigma^2 sum_k (|2 pi k|^2 + tau^2)^(-alpha) pointwise variance).
    Sampled as white noise filtered in Fourier space, so the field is real by construction.
    """
    d = len(shape)
    if sigma is None:
        sigma = tau ** (0.5 * (2 * alpha - d))
    k = wavenumbers(shape, length, rfft=True, dtype=dtype)
    k2 = sum(ki**2 for ki in k)
    amplitude = math.sqrt(2.0 * math.prod(shape)) * sigma * (k2 + tau**2) ** (-alpha / 2)
    amplitude[(0,) * d] = 0.0
    white = torch.randn((n, *shape), generator=generator, dtype=dtype)
    dims = tuple(range(1, d + 1))
    return torch.fft.irfftn(torch.fft.rfftn(white, dim=dims) * amplitude, s=tuple(shape), dim=dims)

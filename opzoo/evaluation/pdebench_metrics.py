"""PDEBench's metric set (Takamoto et al., NeurIPS 2022 Datasets and Benchmarks, Sec. 4 and App. D), as its
``metric_func`` computes them (pdebench/pdebench/models/metrics.py @ 9754b4c, last changed in 4bcbb4c, 2024-12-19),
written here from those definitions, with a spread over trajectories.

For predictions ``p`` and targets ``u`` of shape ``[B, *S, T, C]`` (``B`` trajectories, ``N`` grid points), each
metric is first a ``[C, T]`` array, then its mean over channels and time steps:

- ``RMSE``: per trajectory, channel and step ``e = sqrt(mean_S (p - u)^2)``; its mean over trajectories.
- ``nRMSE``: ``e / sqrt(mean_S u^2)``, averaged over trajectories.
- ``cRMSE`` (the conserved quantity): ``sqrt(mean_B (sum_S p - sum_S u)^2) / N``.
- ``bRMSE`` (the boundary): 1-D, ``sqrt(((p - u)^2 at x_0 + at x_-1) / 2)``; 2-D, the squared errors summed over the
  four edges (the corners twice) over ``2 nx + 2 ny``, then the root; averaged over trajectories. 3-D: the squared
  errors of the six faces summed over faces and channels, over ``2 (nx ny + ny nz + nz nx)``, the root, averaged over
  trajectories and steps (PDEBench's code sums over channels there).
- ``fRMSE`` in three bands: the spectrum of ``p - u`` (``rfft`` in 1-D, ``fftn`` in 2-D/3-D), ``|.|^2`` summed into
  radial bins ``floor(|k|)`` over the non-negative wavenumbers below half of each size (bins below the smallest half
  size), ``sqrt(mean_B)`` times the domain volume over ``N`` (``L = 1`` per axis unless given); the low band is the
  mean over bins ``[0, 4)``, the middle ``[4, 12)``, the high ``[12, ...)``. In 1-D the bins are the rfft's own
  frequencies (PDEBench divides by ``nx`` there too).
- ``max error``: ``max_B max_S |p - u|``.

Each trajectory's contribution is kept (:class:`TrajectoryMetrics`), so that the set's value, a bootstrap interval over
trajectories and a paired comparison with persistence or another model are computed from the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

NAMES = ("RMSE", "nRMSE", "cRMSE", "bRMSE", "fRMSE_low", "fRMSE_mid", "fRMSE_high", "max_error")
I_LOW, I_HIGH = 4, 12  # metric_func's iLow, iHigh


@dataclass
class TrajectoryMetrics:
    """Per-trajectory parts of PDEBench's metrics (each a list over trajectories): ``rmse``, ``nrmse``, ``boundary``
    ``[C, T]`` (3-D: ``[1, T]``); ``conserved`` (``sum_S p - sum_S u``) ``[C, T]``; ``spectrum`` (binned ``|FFT(p - u)|^2``)
    ``[C, bins, T]``; ``max`` ``[C, T]``; ``points`` ``N`` and ``volume`` the domain's."""

    rmse: list[Tensor] = field(default_factory=list)
    nrmse: list[Tensor] = field(default_factory=list)
    conserved: list[Tensor] = field(default_factory=list)
    boundary: list[Tensor] = field(default_factory=list)
    spectrum: list[Tensor] = field(default_factory=list)
    max: list[Tensor] = field(default_factory=list)
    points: int = 0
    volume: float = 1.0

    def __len__(self) -> int:
        return len(self.rmse)

    def add(self, pred: Tensor, truth: Tensor, lengths: tuple[float, ...] | None = None) -> None:
        """Add a batch ``[B, *S, T, C]`` (float64 inside)."""
        p, u = pred.double(), truth.double()
        d = p.ndim - 3  # spatial dims
        spatial = tuple(range(1, 1 + d))
        diff = p - u
        self.points = math.prod(p.shape[1:1 + d])
        self.volume = math.prod(lengths) if lengths else 1.0
        err = diff.pow(2).mean(spatial).sqrt()  # [B, T, C]
        norm = u.pow(2).mean(spatial).sqrt()
        cons = p.sum(spatial) - u.sum(spatial)
        mx = diff.abs().amax(spatial)
        bnd = _boundary(diff)
        spec = _spectrum(diff)
        for b in range(p.shape[0]):
            self.rmse.append(err[b].T)
            self.nrmse.append((err[b] / norm[b]).T)
            self.conserved.append(cons[b].T)
            self.max.append(mx[b].T)
            self.boundary.append(bnd[b])
            self.spectrum.append(spec[b])

    def values(self, idx: list[int] | None = None) -> dict[str, float]:
        """The metrics of the trajectories ``idx`` (default all; repeats allowed, as a bootstrap draws them)."""
        idx = list(range(len(self))) if idx is None else idx
        if not idx:
            return {n: math.nan for n in NAMES}
        counts = torch.zeros(1, len(self), dtype=torch.float64)
        counts.index_add_(1, torch.tensor(idx), torch.ones(1, len(idx), dtype=torch.float64))
        return {k: float(v[0]) for k, v in self.resampled(counts).items()}

    def resampled(self, counts: Tensor) -> dict[str, Tensor]:
        """Each metric ``[n]`` for ``n`` resamples of the trajectories, given as ``counts [n, B]`` (how often each
        trajectory is drawn): weighted means where the metric averages over trajectories, the root of a weighted
        mean of squares for cRMSE and fRMSE, the maximum over the drawn trajectories for the max error."""
        n, total = counts.shape[0], counts.sum(1, keepdim=True)

        def mean(parts: list[Tensor]) -> Tensor:  # [n, *part shape]
            x = torch.stack(parts)
            return (counts @ x.reshape(len(parts), -1) / total).reshape(n, *x.shape[1:])

        conserved = mean([c.pow(2) for c in self.conserved]).sqrt() / self.points
        spectrum = mean(self.spectrum).sqrt() * self.volume / self.points  # [n, C, bins, T]
        drawn = counts > 0
        mx = torch.stack(self.max)  # [B, C, T]
        largest = torch.where(drawn[:, :, None, None], mx[None], torch.tensor(-math.inf, dtype=mx.dtype)).amax(1)
        return {"RMSE": mean(self.rmse).mean((1, 2)), "nRMSE": mean(self.nrmse).mean((1, 2)),
                "cRMSE": conserved.mean((1, 2)), "bRMSE": mean(self.boundary).mean((1, 2)),
                "fRMSE_low": spectrum[:, :, :I_LOW].mean(2).mean((1, 2)),
                "fRMSE_mid": spectrum[:, :, I_LOW:I_HIGH].mean(2).mean((1, 2)),
                "fRMSE_high": spectrum[:, :, I_HIGH:].mean(2).mean((1, 2)),
                "max_error": largest.mean((1, 2))}


def _boundary(diff: Tensor) -> Tensor:
    """``[B, C, T]`` (3-D: ``[B, 1, T]``) root mean squared error on the domain's boundary, as metric_func forms it."""
    sq = diff.pow(2)
    d = diff.ndim - 3
    if d == 1:
        return ((sq[:, 0] + sq[:, -1]) / 2.0).sqrt().transpose(1, 2)
    if d == 2:
        nx, ny = diff.shape[1:3]
        edges = sq[:, 0].sum(1) + sq[:, -1].sum(1) + sq[:, :, 0].sum(1) + sq[:, :, -1].sum(1)  # [B, T, C]
        return (edges / (2 * nx + 2 * ny)).sqrt().transpose(1, 2)
    nx, ny, nz = diff.shape[1:4]
    faces = (sq[:, 0] + sq[:, -1]).sum((1, 2)) + (sq[:, :, 0] + sq[:, :, -1]).sum((1, 2)) + \
        (sq[:, :, :, 0] + sq[:, :, :, -1]).sum((1, 2))  # [B, T, C]
    total = faces.sum(-1) / (2 * nx * ny + 2 * ny * nz + 2 * nz * nx)  # summed over channels, as theirs
    return total.sqrt()[:, None, :]


def _spectrum(diff: Tensor) -> Tensor:
    """``[B, C, bins, T]``: ``|FFT(p - u)|^2`` summed into radial bins ``floor(|k|)`` (1-D: the rfft's frequencies)."""
    d = diff.ndim - 3
    x = diff.movedim(-1, 1)  # [B, C, *S, T]
    if d == 1:
        return torch.fft.rfft(x, dim=2).abs().pow(2)
    f = torch.fft.fftn(x, dim=tuple(range(2, 2 + d))).abs().pow(2)
    halves = [n // 2 for n in diff.shape[1:1 + d]]
    bins = min(halves)
    grids = torch.meshgrid(*[torch.arange(h, dtype=torch.float64) for h in halves], indexing="ij")
    radius = torch.floor(torch.sqrt(sum(g ** 2 for g in grids))).long()  # floor(sqrt(i^2 + j^2 [+ k^2]))
    kept = f[(slice(None), slice(None), *[slice(0, h) for h in halves])]  # the non-negative quadrant
    out = torch.zeros(*f.shape[:2], bins, f.shape[-1], dtype=f.dtype)
    inside = radius < bins
    flat = kept.reshape(*f.shape[:2], -1, f.shape[-1])[:, :, inside.flatten()]
    return out.index_add_(2, radius.flatten()[inside.flatten()], flat)


def bootstrap(metrics: TrajectoryMetrics, other: TrajectoryMetrics | None = None, n: int = 1000, seed: int = 0,
              level: float = 0.95) -> dict[str, tuple[float, float]]:
    """A percentile bootstrap interval over trajectories of each metric, or, with ``other`` (the same trajectories
    scored by another model or by persistence), of the difference ``metrics - other`` (a paired comparison: both
    resampled with the same draws)."""
    m = len(metrics)
    if other is not None and len(other) != m:
        raise ValueError(f"a paired comparison needs the same trajectories: {m} and {len(other)}")
    g = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, m, (n, m), generator=g)
    counts = torch.zeros(n, m, dtype=torch.float64).scatter_add_(1, draws, torch.ones(n, m, dtype=torch.float64))
    values = metrics.resampled(counts)
    if other is not None:
        theirs = other.resampled(counts)
        values = {k: v - theirs[k] for k, v in values.items()}
    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    return {k: (float(torch.quantile(v, lo)), float(torch.quantile(v, hi))) for k, v in values.items()}


__all__ = ["NAMES", "TrajectoryMetrics", "bootstrap"]

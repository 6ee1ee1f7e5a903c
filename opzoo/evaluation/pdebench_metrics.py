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
from typing import Sequence

import torch
from torch import Tensor

from ..registry.metric import Metric

MAX_PARTS = 2**16  # values a metric's parts() may keep per trajectory (a bootstrap keeps n of them per resample)
_SAID: set[str] = set()  # the left-out metrics already said in this process
NAMES = ("RMSE", "nRMSE", "cRMSE", "bRMSE", "fRMSE_low", "fRMSE_mid", "fRMSE_high", "max_error")
I_LOW, I_HIGH = 4, 12  # metric_func's iLow, iHigh


def _spatial(p: Tensor) -> tuple[int, ...]:
    return tuple(range(1, p.ndim - 2))


def _rmse(p: Tensor, u: Tensor, lengths) -> Tensor:
    return (p - u).pow(2).mean(_spatial(p)).sqrt().transpose(1, 2)  # [B, C, T]


def _nrmse(p: Tensor, u: Tensor, lengths) -> Tensor:
    return _rmse(p, u, lengths) / u.pow(2).mean(_spatial(p)).sqrt().transpose(1, 2)


def _conserved(p: Tensor, u: Tensor, lengths) -> Tensor:
    points = math.prod(p.shape[1:-2])
    return ((p.sum(_spatial(p)) - u.sum(_spatial(u))) / points).pow(2).transpose(1, 2)  # [B, C, T]: pooled, rooted


def _boundary_parts(p: Tensor, u: Tensor, lengths) -> Tensor:
    return _boundary(p - u)


def _spectrum_parts(p: Tensor, u: Tensor, lengths) -> Tensor:
    scale = math.prod(lengths) / math.prod(p.shape[1:-2])  # the domain volume over N
    return _spectrum(p - u) * scale**2  # [B, C, bins, T]: pooled, rooted, averaged over a band of bins


def _largest(p: Tensor, u: Tensor, lengths) -> Tensor:
    return (p - u).abs().amax(_spatial(p)).transpose(1, 2)


def _root_mean(pooled: Tensor) -> Tensor:
    return pooled.sqrt().reshape(pooled.shape[0], -1).mean(1)


def _band(lo: int, hi: int | None):
    def reduce(pooled: Tensor) -> Tensor:  # [n, C, bins, T]
        return pooled.sqrt()[:, :, lo:hi].mean(2).mean((1, 2))
    return reduce


#: PDEBench's set as :class:`opzoo.Metric` s, registered by the core first (``host.builtins``).
PDEBENCH_METRICS = (
    Metric("RMSE", _rmse, description="root mean squared error over the grid, per channel and step"),
    Metric("nRMSE", _nrmse, description="RMSE over the root mean square of the truth"),
    Metric("cRMSE", _conserved, reduce=_root_mean,
           description="error of the conserved quantity (the sum over the grid), over the grid's points"),
    Metric("bRMSE", _boundary_parts, description="RMSE on the domain's boundary"),
    Metric("fRMSE_low", _spectrum_parts, reduce=_band(0, I_LOW), description="spectral error, wavenumbers 0-3"),
    Metric("fRMSE_mid", _spectrum_parts, reduce=_band(I_LOW, I_HIGH), description="spectral error, wavenumbers 4-11"),
    Metric("fRMSE_high", _spectrum_parts, reduce=_band(I_HIGH, None), description="spectral error, wavenumbers 12+"),
    Metric("max_error", _largest, pool="max", description="largest absolute error over the grid and trajectories"),
)


BANDS = {"fRMSE_low": (0, I_LOW), "fRMSE_mid": (I_LOW, I_HIGH), "fRMSE_high": (I_HIGH, None)}


def spectral_bins(grid: Sequence[int]) -> int:
    """How many radial bins :func:`_spectrum` has on ``grid`` (1-D: the rfft's frequencies; else half the smallest
    size)."""
    return grid[0] // 2 + 1 if len(grid) == 1 else min(n // 2 for n in grid)


def why_undefined(name: str, grid: Sequence[int]) -> str:
    """Why metric ``name`` has no value (NaN) on data at ``grid``: a spectral band beyond the grid's wavenumbers, or
    (any other metric) data it is not defined on."""
    if name in BANDS and grid and BANDS[name][0] >= spectral_bins(grid):
        return (f"{name}: the grid {'x'.join(map(str, grid))} has no wavenumber of {BANDS[name][0]} or more (its "
                f"radial bins stop below {spectral_bins(grid)})")
    return f"{name}: not defined on these data"


def registered_metrics() -> tuple[Metric, ...]:
    """The metrics every evaluation scores: the registry's (PDEBench's set, then the plugins'), or PDEBench's set
    when no plugin host runs."""
    from ..registry.registry import live_registry

    registry = live_registry()
    if registry is None:
        from ..registry.registry import get_registry

        try:
            registry = get_registry()
        except RuntimeError:
            return PDEBENCH_METRICS
    return tuple(registry.metrics()) or PDEBENCH_METRICS


def plugin_metric_names(metrics) -> list[str]:
    """The names in ``metrics`` beyond PDEBench's set: the metrics plugins registered (:class:`opzoo.Metric`)."""
    return [k for k in metrics if k not in NAMES]


@dataclass
class TrajectoryMetrics:
    """Each metric's per-trajectory parts (:class:`opzoo.Metric`), kept so that the set's values, bootstrap
    intervals over trajectories and paired comparisons come from the same numbers. ``metrics``: the metrics scored
    (default: every registered one, :func:`registered_metrics`)."""

    metrics: Sequence[Metric] | None = None
    parts: dict[str, list[Tensor]] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)  # a plugin's metric that failed: why (said once)

    def __post_init__(self) -> None:
        from ..registry.plugin_calls import is_plugins

        self.metrics = tuple(registered_metrics() if self.metrics is None else self.metrics)
        self._guarded = {m.name for m in self.metrics if is_plugins("metric", m.name)}
        for m in self.metrics:
            self.parts.setdefault(m.name, [])

    def _leave_out(self, m: Metric, why: str) -> None:
        """Drop a plugin's metric that failed (the others go on), and say so once per process."""
        import logging

        self.metrics = tuple(x for x in self.metrics if x.name != m.name)
        self.parts.pop(m.name, None)
        self.left_out[m.name] = why
        if why not in _SAID:
            _SAID.add(why)
            logging.getLogger("opzoo").warning(f"left out of the scores: {why}; the other metrics go on")

    def __len__(self) -> int:
        return len(next(iter(self.parts.values()), []))

    _RENAMED = {"rmse": "RMSE", "nrmse": "nRMSE", "boundary": "bRMSE", "max": "max_error"}  # the parts kept as were

    def __getattr__(self, name: str):
        if name in self._RENAMED:  # the fields before the parts were per metric (0.x): one release more
            import warnings

            warnings.warn(f"TrajectoryMetrics.{name} is deprecated; use .parts[{self._RENAMED[name]!r}] (removed in "
                          f"the next release)", DeprecationWarning, stacklevel=2)
            return self.parts[self._RENAMED[name]]
        if name in ("conserved", "spectrum", "points", "volume"):
            raise AttributeError(f"TrajectoryMetrics.{name} is gone: the parts are per metric now, "
                                 f"parts['cRMSE'] and parts['fRMSE_low'] scaled by the grid (CHANGELOG.md)")
        raise AttributeError(name)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def add(self, pred: Tensor, truth: Tensor, lengths: tuple[float, ...] | None = None) -> None:
        """Add a batch ``[B, *S, T, C]`` (float64 inside); ``lengths``: the domain's per spatial axis (default 1)."""
        from ..registry.plugin_calls import PluginCallError, call_plugin, plugin_label

        p, u = pred.double(), truth.double()
        lengths = tuple(lengths) if lengths else (1.0,) * (p.ndim - 3)
        for m in self.metrics:
            guarded = m.name in self._guarded
            try:
                value = call_plugin(m.parts, p, u, lengths, what=plugin_label("metric", m.name)) if guarded else \
                    m.parts(p, u, lengths)
                if not isinstance(value, Tensor) or value.ndim < 1 or value.shape[0] != p.shape[0]:
                    raise ValueError(f"metric {m.name!r}: parts() must return a tensor [B, ...] with one entry per "
                                     f"trajectory (B = {p.shape[0]}), got "
                                     f"{tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__}")
                if value[0].numel() > MAX_PARTS:
                    raise ValueError(f"metric {m.name!r}: parts() returned {value[0].numel():,} values per trajectory, "
                                     f"more than {MAX_PARTS:,} (its bootstrap would not fit in memory)")
                if value.dtype.is_complex:
                    raise ValueError(f"metric {m.name!r}: parts() returned {value.dtype}, not real numbers")
            except (PluginCallError, ValueError, TypeError, RuntimeError) as e:
                if not guarded:
                    raise
                why = str(e) if isinstance(e, PluginCallError) else f"{plugin_label('metric', m.name)}: {e}"
                self._leave_out(m, why)
                continue
            self.parts[m.name].extend(value.double().unbind(0))

    def values(self, idx: list[int] | None = None) -> dict[str, float]:
        """The metrics of the trajectories ``idx`` (default all; repeats allowed, as a bootstrap draws them)."""
        idx = list(range(len(self))) if idx is None else idx
        if not idx:
            return {n: math.nan for n in self.names}
        counts = torch.zeros(1, len(self), dtype=torch.float64)
        counts.index_add_(1, torch.tensor(idx), torch.ones(1, len(idx), dtype=torch.float64))
        return {k: float(v[0]) for k, v in self.resampled(counts).items()}

    def resampled(self, counts: Tensor) -> dict[str, Tensor]:
        """Each metric ``[n]`` for ``n`` resamples of the trajectories, given as ``counts [n, B]`` (how often each
        trajectory is drawn): its ``reduce`` of the weighted mean of its parts over the drawn trajectories (``pool``
        ``"mean"``), or of their maximum (``"max"``)."""
        n, total = counts.shape[0], counts.sum(1, keepdim=True)
        drawn = counts > 0
        out = {}
        for m in self.metrics:
            x = torch.stack(self.parts[m.name])  # [B, ...]
            if m.pool == "max":
                shape = (n, x.shape[0]) + (1,) * (x.ndim - 1)
                pooled = torch.where(drawn.reshape(shape), x[None], torch.tensor(-math.inf, dtype=x.dtype)).amax(1)
            else:
                pooled = (counts @ x.reshape(x.shape[0], -1) / total).reshape(n, *x.shape[1:])
            if m.name not in self._guarded:
                out[m.name] = m.reduce(pooled)
                continue
            from ..registry.plugin_calls import PluginCallError, call_plugin, plugin_label

            try:
                value = call_plugin(m.reduce, pooled, what=plugin_label("metric", m.name))
                if not isinstance(value, Tensor) or value.shape != (n,):
                    raise ValueError(f"reduce() must return a tensor [{n}], got "
                                     f"{tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__}")
            except (PluginCallError, ValueError, TypeError, RuntimeError) as e:
                self._leave_out(m, str(e) if isinstance(e, PluginCallError) else
                                f"{plugin_label('metric', m.name)}: {e}")
                continue
            out[m.name] = value
        return out


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
    resampled with the same draws) for each metric both scored."""
    m = len(metrics)
    if other is not None and len(other) != m:
        raise ValueError(f"a paired comparison needs the same trajectories: {m} and {len(other)}")
    g = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, m, (n, m), generator=g)
    counts = torch.zeros(n, m, dtype=torch.float64).scatter_add_(1, draws, torch.ones(n, m, dtype=torch.float64))
    values = metrics.resampled(counts)
    if other is not None:
        theirs = other.resampled(counts)
        values = {k: v - theirs[k] for k, v in values.items() if k in theirs}
    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    return {k: (float(torch.quantile(v, lo)), float(torch.quantile(v, hi))) for k, v in values.items()}


__all__ = ["NAMES", "PDEBENCH_METRICS", "TrajectoryMetrics", "bootstrap", "plugin_metric_names", "registered_metrics"]

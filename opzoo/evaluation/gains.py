"""Sample-efficiency gains of a model over a baseline, as Poseidon's paper reports them (Herde et al., "Poseidon:
Efficient Foundation Models for PDEs", NeurIPS 2024, arXiv:2405.19101: the efficiency gain EG and the accuracy gain AG
of each model over an FNO trained from scratch, read off the curves of error against the number of training
trajectories N; the paper's section and equation numbers could not be read here, see docs/compare.md).

- ``accuracy_gain``: ``AG(N) = E_baseline(N) / E_model(N)``;
- ``efficiency_gain``: ``EG = N_max / N*``, where ``N_max`` is the largest N and ``N*`` the number of trajectories at
  which the model's curve reaches the baseline's error at ``N_max``. The curve is the straight line between measured
  points in log-log coordinates (a power law between them); ``N*`` below the smallest measured N or above the largest
  is extrapolated along the nearest segment, and said so; not further than :data:`EXTRAPOLATION` times beyond the
  measured Ns (a nearly flat segment would put it anywhere): past that, EG is given as a bound (``> x`` or ``< x``).

Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

EXTRAPOLATION = 10.0  # how far beyond the measured Ns (as a factor) an extrapolated N* is read


@dataclass(frozen=True)
class Gain:
    value: float
    extrapolated: bool = False  # EG: N* lies outside the measured Ns (read off the extended end segment)
    bound: str = ""  # ">": at least value (N* below the extrapolation's reach), "<": at most value

    def text(self) -> str:
        if self.value != self.value:  # NaN
            return "–"
        return f"{self.bound} {self.value:.3g}".strip() + (" (extrapolated)" if self.extrapolated else "")


def accuracy_gain(baseline_error: float, model_error: float) -> float:
    """``E_baseline / E_model`` (> 1: the model is more accurate); NaN where either is not a positive number."""
    if not (baseline_error > 0 and model_error > 0) or math.isinf(baseline_error) or math.isinf(model_error):
        return math.nan
    return baseline_error / model_error


def crossing(ns: Sequence[float], errors: Sequence[float], target: float) -> tuple[float, bool]:
    """``(N*, extrapolated)``: where the piecewise log-log line through ``(ns, errors)`` first comes down to
    ``target`` (NaN when it never can: fewer than two points, or an end segment that does not fall towards it)."""
    pts = sorted((float(n), float(e)) for n, e in zip(ns, errors) if n > 0 and e > 0 and math.isfinite(e))
    if len(pts) < 2 or not target > 0:
        return math.nan, False
    x = [math.log(n) for n, _ in pts]
    y = [math.log(e) for _, e in pts]
    t = math.log(target)

    def at(i: int) -> float:  # N where segment (i, i+1), extended, meets the target
        slope = (y[i + 1] - y[i]) / (x[i + 1] - x[i])
        if slope == 0:
            return math.nan
        z = x[i] + (t - y[i]) / slope  # a nearly flat segment meets the target far out: inf, beyond every bound
        return math.inf if z > 700 else math.exp(z)

    if y[0] <= t:  # already at or below the target at the smallest N: extrapolate down the first segment
        if y[0] == t:
            return pts[0][0], False
        n = at(0)
        return (n, True) if y[1] < y[0] and n > 0 else (math.nan, False)
    for i in range(len(pts) - 1):
        if y[i] > t >= y[i + 1]:
            return at(i), False
    n = at(len(pts) - 2)  # never reached: extend the last segment, if it falls
    return (n, True) if y[-1] < y[-2] and n > 0 else (math.nan, False)


def efficiency_gain(ns: Sequence[float], model_errors: Sequence[float], baseline_errors: Sequence[float]) -> Gain:
    """EG of a model over the baseline, both measured at ``ns`` (see the module doc)."""
    pairs = [(n, b) for n, b in zip(ns, baseline_errors) if math.isfinite(b)]
    if not pairs:
        return Gain(math.nan)
    n_max, target = max(pairs)
    n_star, extrapolated = crossing(ns, model_errors, target)
    if not n_star > 0:
        return Gain(math.nan)
    low, high = min(ns) / EXTRAPOLATION, max(ns) * EXTRAPOLATION
    if n_star < low:
        return Gain(n_max / low, True, ">")
    if n_star > high:
        return Gain(n_max / high, True, "<")
    return Gain(n_max / n_star, extrapolated)


__all__ = ["EXTRAPOLATION", "Gain", "accuracy_gain", "crossing", "efficiency_gain"]

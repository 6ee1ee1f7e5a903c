"""A score of a rollout that a plugin can register (``registry.register_metric``), computed the way PDEBench's set is:
per trajectory first, so that its value over a set of trajectories, a 95 % bootstrap interval and a paired
difference from persistence or another model all come from the same numbers (:mod:`opzoo.evaluation.pdebench_metrics`).

No torch at import: the functions receive and return tensors, but this module only describes them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

POOLS = ("mean", "max")


def _mean_of_all(pooled):
    """The default ``reduce``: the mean over every dimension but the resamples' (``[n, ...] -> [n]``)."""
    return pooled.reshape(pooled.shape[0], -1).mean(1)


@dataclasses.dataclass(frozen=True)
class Metric:
    """One score of predictions ``pred`` against ``truth``, both ``[B, *S, T, C]`` at the data's own grid and float64,
    the channels the data hold (padded ones left out).

    - ``parts(pred, truth, lengths) -> [B, ...]``: each trajectory's contribution (e.g. its error ``[B]``, or per
      channel and step ``[B, C, T]``); ``lengths``: the domain's length along each spatial axis (1.0 each unless the
      caller knows them);
    - ``pool``: how trajectories combine, ``"mean"`` (a weighted mean over the trajectories drawn) or ``"max"`` (the
      largest over them);
    - ``reduce(pooled [n, ...]) -> [n]``: the value from the pooled parts of ``n`` resamples (default: the mean over
      every other dimension). A root of a mean of squares (PDEBench's cRMSE) pools squares and takes the root here.

    ``name`` is the column and key it is reported under (``eval.json``'s ``pdebench_metrics``, ``validate``'s CSV);
    ``description`` is one line for the docs. Lower is better for every metric opzoo reports.
    """

    name: str
    parts: Callable
    pool: str = "mean"
    reduce: Callable = _mean_of_all
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", self.name):
            raise ValueError(f"Metric name {self.name!r}: letters, digits and '_' (it names a CSV column)")
        if not callable(self.parts) or not callable(self.reduce):
            raise TypeError(f"Metric {self.name!r}: parts and reduce must be callables")
        if self.pool not in POOLS:
            raise ValueError(f"Metric {self.name!r}: pool must be one of {', '.join(POOLS)}, got {self.pool!r}")


__all__ = ["Metric", "POOLS"]

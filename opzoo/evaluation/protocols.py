"""The published papers' own scores of a rollout, each as its source computes it, per test trajectory (so that
``opzoo compare`` can aggregate them as each paper does and bootstrap them).

- **Poseidon's error** (Herde et al., arXiv:2405.19101: Section 3 "Evaluation metrics", Eq. (11), SM D.1 and
  Table 6, as issue 68 cites them; the paper's text was not readable here. Read in upstream's code: ``relative_lp_error``
  with p = 1 in camlab-ethz/poseidon scOT/metrics.py, aggregated by scOT/inference.py ``compute_metrics`` @ v1-paper,
  2cc8c85): at one snapshot (the final time), for each *function* (a field,
  or the components of one vector field together: scOT's ``channel_slice_list``, e.g. ``[rho],[u,v],[p]``), the
  relative L1 error ``sum |pred - true| / sum |true|`` over the function's channels and the grid (a zero denominator
  counts as 1e-10); the median over test trajectories per function, then the mean over the functions. Upstream
  reports it in percent; here it is the ratio. :func:`poseidon_errors` gives ``[trajectory, function]``,
  :func:`poseidon_error` aggregates.
- **The Well's windows** (:data:`opzoo.evaluation.vrmse.WINDOWS`: the_well @ 215f55d,
  the_well/benchmark/trainer/training.py ``split_up_losses``): VRMSE per field and step, averaged over the
  window's steps and the fields, and over trajectories by the **mean** (``validation_loop`` averages batch means).
  The one-step VRMSE too.
- **Walrus's windows** (McCabe et al., arXiv:2511.15684): predicted frames 1-20 and 21-60 with the **median** over
  trajectories. UNVERIFIED: the paper's tables could not be read here (only its opening pages were reachable
  offline); the windows are those issue 58 cites from its Table 1, the median is what a third-party report of its
  Table 7 says ("median VRMSE"), and its released trainer (PolymathicAI/walrus_steering @ e963fad,
  walrus_steering/trainer/training.py ``split_up_losses``) logs The Well's log-spaced windows with the mean. Checked
  against the paper, this is the first thing to confirm.

A window that a rollout is too short for is not computed; :func:`window_scores` says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from .vrmse import WINDOWS as WELL_WINDOWS

POSEIDON_EPS = 1e-10  # scOT/metrics.py: a zero normalization factor counts as this


@dataclass(frozen=True)
class Window:
    name: str  # the column: "vrmse_well_6_12"
    label: str  # as its paper prints it: "6:12"
    start: int  # python slice of the predicted frames (0: the first predicted)
    stop: int
    aggregate: str  # over trajectories: "mean" or "median"
    protocol: str  # whose: "The Well", "Walrus"


WINDOWS = (
    Window("vrmse_well_1", "1", 0, 1, "mean", "The Well"),
    *(Window(f"vrmse_well_{label.replace(':', '_')}", label, a, b, "mean", "The Well") for label, a, b in WELL_WINDOWS),
    Window("vrmse_walrus_1_20", "1:20", 0, 20, "median", "Walrus"),
    Window("vrmse_walrus_21_60", "21:60", 20, 60, "median", "Walrus"),
)

_VECTOR = re.compile(r"^(?P<base>.+?)_(?P<axes>[xyz]{1,2})$")  # The Well's components: velocity_x, D_xy
_PDEBENCH = re.compile(r"^(?P<base>V)(?P<axes>[xyz])$")  # PDEBench's Vx, Vy, Vz


def functions_of(names: Sequence[str], given: Sequence[Sequence[str]] | None = None) -> list[tuple[str, list[int]]]:
    """``[(function, channels)]`` over the channels ``names``: the components of a vector or tensor field named as
    The Well names them (``velocity_x``, ``velocity_y``; ``D_xx``...) or as PDEBench does (``Vx``, ``Vy``) form one
    function; every other field is a function of its own (two fields are never merged on a guess: a file's ``u`` and
    ``v`` may be two species). ``given``: the functions as the user names them (``[["u", "v"], ["p"]]``); every name
    must be a channel, and each channel in at most one function (those not named are functions of their own)."""
    index = {n: i for i, n in enumerate(names)}
    out: list[tuple[str, list[int]]] = []
    taken: set[int] = set()
    for group in given or []:
        missing = [g for g in group if g not in index]
        if missing:
            from ..errors import ConfigError

            raise ConfigError(f"--functions: {', '.join(missing)} not among the fields {list(names)}")
        channels = [index[g] for g in group]
        if taken & set(channels):
            from ..errors import ConfigError

            raise ConfigError(f"--functions: {', '.join(group)} names a field of another function")
        taken |= set(channels)
        out.append(("+".join(group), channels))
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        if i in taken:
            continue
        m = _VECTOR.match(name) or _PDEBENCH.match(name)
        groups.setdefault(m.group("base") if m else name, []).append(i)
    for base, channels in groups.items():
        out.append((base if len(channels) > 1 else names[channels[0]], channels))
    return out


def poseidon_errors(pred: Tensor, truth: Tensor, functions: Sequence[Sequence[int]], frame: int = -1) -> Tensor:
    """``[B, *S, H, C]`` prediction and truth -> ``[B, F]``: each function's relative L1 error at predicted frame
    ``frame`` (default the last), over its channels and the grid (float64)."""
    p = pred[..., frame, :].double().flatten(1, -2)  # [B, points, C]
    u = truth[..., frame, :].double().flatten(1, -2)
    out = []
    for channels in functions:
        num = (p[..., channels] - u[..., channels]).abs().sum((1, 2))
        den = u[..., channels].abs().sum((1, 2))
        out.append(num / torch.where(den == 0, torch.full_like(den, POSEIDON_EPS), den))
    return torch.stack(out, 1)


def poseidon_error(per_function: Tensor) -> float:
    """``[trajectories, functions]`` -> the mean over functions of the median over trajectories (NaN entries, a
    function a file lacks, left out of its median). Medians of an even count are the mean of the two middle values
    (numpy's ``np.median``, as upstream)."""
    medians = [_median(per_function[:, f]) for f in range(per_function.shape[1])]
    medians = [m for m in medians if m == m]
    return sum(medians) / len(medians) if medians else float("nan")


def _median(x: Tensor) -> float:
    x = x[~torch.isnan(x)]
    return float(torch.quantile(x.double(), 0.5)) if x.numel() else float("nan")


def window_scores(v: Tensor) -> tuple[dict[str, Tensor], dict[str, str]]:
    """``v``: VRMSE ``[B, H, fields]`` of a rollout -> ``({window: [B]}, {window: why it is n/a})``: each window's
    mean over its steps and the fields, per trajectory."""
    horizon = v.shape[1]
    scores, missing = {}, {}
    for w in WINDOWS:
        if horizon >= w.stop:
            scores[w.name] = v[:, w.start:w.stop].mean((1, 2)).double()
        else:
            missing[w.name] = (f"{w.protocol}'s window {w.label} needs {w.stop} predicted frames, the rollout "
                               f"predicts {horizon}")
    return scores, missing


__all__ = ["POSEIDON_EPS", "WINDOWS", "Window", "functions_of", "poseidon_error", "poseidon_errors", "window_scores"]

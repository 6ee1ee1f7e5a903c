"""Non-finite data, named: which file, which trajectory (its index in the file), how many values.

Training stops at the first batch holding NaN/Inf (:func:`bad_windows_message`); test sets are
checked before training starts (:func:`check_test_sets`); ``opzoo eval`` checks the trajectories it
rolls out and can skip them instead (:func:`scan_trajectories`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..data import TrajectoryDataset
from ..data.errors import NonFiniteDataError

OVERFLOW = 1e18  # |x| at least this overflows float32 once squared (the relative L2 sums squares)


@dataclass(frozen=True)
class BadTrajectory:
    """Trajectory ``index`` (in the file) of ``path``: ``count`` unusable values (NaN/Inf, or so large that
    their squares overflow float32), the first in ``first_frame``; ``count == 0`` with ``all_zero``: a
    trajectory that is zero everywhere, whose relative error is undefined."""

    path: str
    index: int  # in the file
    position: int  # in the (possibly subset) source it was found in
    count: int
    first_frame: int
    frames: int  # frames checked (0 .. frames-1)
    all_zero: bool = False
    overflow: int = 0  # of ``count``: finite values of magnitude >= OVERFLOW

    def describe(self) -> str:
        if self.all_zero:
            return (f"{self.path}: trajectory {self.index} is zero everywhere (the {self.frames} frames checked): "
                    f"an error relative to it is undefined")
        what = [f"{self.count - self.overflow} NaN/Inf value(s)"] if self.count > self.overflow else []
        if self.overflow:
            what.append(f"{self.overflow} value(s) of magnitude >= {OVERFLOW:g}, which overflow float32 when squared")
        return (f"{self.path}: trajectory {self.index} holds {' and '.join(what)} (first in frame {self.first_frame} "
                f"of the {self.frames} checked)")


def non_finite_in(values: np.ndarray) -> tuple[int, int]:
    """``(count, first frame)`` of NaN/Inf (and of values of magnitude >= ``OVERFLOW``) in ``values [*S, T, C]``
    (``(0, -1)`` if there is none)."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (np.abs(values) >= OVERFLOW)
    count = int(bad.sum())
    if not count:
        return 0, -1
    per_frame = bad.reshape(-1, *values.shape[-2:]).any(axis=(0, 2))
    return count, int(np.flatnonzero(per_frame)[0])


def scan_trajectories(source: TrajectoryDataset, n: int | None = None, frames: int | None = None) -> list[BadTrajectory]:
    """Every trajectory among the first ``n`` of ``source`` (a subset: indices reported in the file)
    with NaN/Inf in frames ``0 .. frames`` (default: all)."""
    n = len(source) if n is None else min(n, len(source))
    t = source.n_steps if frames is None else min(frames, source.n_steps)
    out = []
    for i in range(n):
        values = source.read(i, 0, t).numpy()
        count, first = non_finite_in(values)
        if count:
            with np.errstate(invalid="ignore"):
                overflow = int((np.isfinite(values) & (np.abs(values) >= OVERFLOW)).sum())
            out.append(BadTrajectory(source.path, source.indices[i], i, count, first, t, overflow=overflow))
        elif not values.any():
            out.append(BadTrajectory(source.path, source.indices[i], i, 0, -1, t, all_zero=True))
    return out


def check_test_sets(test: Sequence[tuple[str, TrajectoryDataset]], frames: Sequence[int], limit: int | None,
                    what: str = "test") -> None:
    """Refuse NaN/Inf in the frames each test (or ``what``) set's evaluation will read, before any training."""
    bad = [b for (name, src), t in zip(test, frames) for b in scan_trajectories(src, limit, t)]
    if bad:
        more = f" and {len(bad) - 1} more trajectory(ies)" if len(bad) > 1 else ""
        raise NonFiniteDataError(f"non-finite {what} data: {bad[0].describe()}{more}; nothing was trained. Repair or "
                                 f"remove it (`opzoo data inspect {bad[0].path}` lists every such trajectory)")


def bad_windows_message(windows: Sequence[tuple[TrajectoryDataset | object, int]], step: int) -> str:
    """The message for a training batch of ``step`` holding NaN/Inf: ``windows`` are ``(source, sample)``
    of the windows found bad (``source`` has ``path`` and ``read(sample)``), the first is described."""
    source, sample = windows[0]
    values = np.asarray(source.read(sample), dtype=np.float32)
    count, first = non_finite_in(values)
    n_traj = len({(getattr(s, "path", ""), k) for s, k in windows})
    more = f" (and {n_traj - 1} more trajectory(ies) in this batch)" if n_traj > 1 else ""
    with np.errstate(invalid="ignore"):
        huge = int((np.isfinite(values) & (np.abs(values) >= OVERFLOW)).sum())
    what = f"{count} NaN/Inf value(s)" if not huge else \
        f"{count} NaN/Inf value(s) or value(s) of magnitude >= {OVERFLOW:g} ({huge}: squares overflow float32)"
    return (f"non-finite training data: {source.path}: trajectory {sample} holds {what} "
            f"(first in frame {first}){more}, in the batch of step {step}; stopping before the update. Repair or "
            f"rescale it (`opzoo data inspect {source.path}` lists every such trajectory)")


def bad_trajectories_of(sources, frame_shape, horizon, limit, skip: bool, every_window: bool = False) -> list[list]:
    """Per source, the trajectories with NaN/Inf in the frames a rollout reads; refused unless ``skip`` (with
    ``every_window``, The Well's protocol, skipping is no choice: the message says to repair the file)."""
    from .shape_check import check_frames

    found = []
    for src in sources:
        frames = check_frames(src, frame_shape.in_timesteps, frame_shape.out_timesteps, horizon, "--horizon")
        bad = scan_trajectories(src, limit, frames)
        if bad and not skip:
            more = f" (and {len(bad) - 1} more trajectory(ies) in that file)" if len(bad) > 1 else ""
            advice = ("repair the file (--windows all scores every window, as The Well's test does)" if every_window
                      else "pass --skip-bad-trajectories to evaluate without them, or repair the file")
            raise NonFiniteDataError(f"non-finite data: {bad[0].describe()}{more}; {advice}")
        n = len(src) if limit is None else min(limit, len(src))
        if skip and len(bad) == n:
            raise NonFiniteDataError(f"{src.path}: every one of the {n} trajectories evaluated holds NaN/Inf values")
        found.append(bad)
    return found

"""PyTorch datasets over one trajectory file: training windows and whole trajectories.

Both resize space to a common resolution and pad channels to a common count (with a mask), so
that datasets of different PDEs can be mixed (:mod:`opzoo.data.mixture`).
"""

from __future__ import annotations

import os
import warnings
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from opzoo.data.readers import TrajectorySource, open_source
from opzoo.data.transforms import as_size, pad_channels, resize

NAN_POLICIES = ("raise", "skip")


def _as_source(source: TrajectorySource | str | os.PathLike, layout: str | None) -> TrajectorySource:
    return source if isinstance(source, TrajectorySource) else open_source(source, layout=layout)


def _as_samples(samples: Sequence[int] | range | None, n: int, path: str) -> np.ndarray:
    index = np.arange(n) if samples is None else np.asarray(list(samples), dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() >= n):
        raise IndexError(f"{path}: samples must lie in [0, {n}); got {index.min()}..{index.max()}")
    return index


class WindowDataset(Dataset):
    """Training windows from one file: ``t_in`` frames and the ``t_out`` frames after them.

    Item ``i`` is a dict of tensors:

    * ``x``: ``[*R, t_in, C_max]`` float32 input frames
    * ``y``: ``[*R, t_out, C_max]`` float32 target frames
    * ``mask``: ``[C_max]`` bool, True for real channels (padding is ``pad_value``)
    * ``dataset``: ``[]`` int64, ``dataset_index`` (its position in a mixture)

    where ``R`` is ``resolution`` (or the file's ``S``) and ``C_max`` is ``n_channels`` (or the
    file's ``C``). Windows start every ``stride`` frames. ``samples`` restricts the trajectories
    (e.g. a train split). ``nan_policy="raise"`` fails on a window with NaN/Inf naming the file,
    key, sample and frames; ``"skip"`` scans the file once at construction, leaves out every window
    touching a non-finite frame and warns with the count (``self.skipped_windows``).
    """

    def __init__(
        self,
        source: TrajectorySource | str | os.PathLike,
        t_in: int = 10,
        t_out: int = 1,
        *,
        resolution: int | Sequence[int] | None = None,
        n_channels: int | None = None,
        pad_value: float = 1.0,
        samples: Sequence[int] | range | None = None,
        stride: int = 1,
        nan_policy: str = "raise",
        layout: str | None = None,
        dataset_index: int = 0,
    ):
        if nan_policy not in NAN_POLICIES:
            raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
        if t_in < 1 or t_out < 1 or stride < 1:
            raise ValueError(f"t_in, t_out and stride must be >= 1; got {t_in}, {t_out}, {stride}")
        self.source = _as_source(source, layout)
        self.t_in, self.t_out, self.stride = int(t_in), int(t_out), int(stride)
        n_spatial = len(self.source.spatial_shape)
        self.resolution = as_size(resolution, n_spatial) if resolution is not None else tuple(self.source.spatial_shape)
        self.n_channels = int(n_channels) if n_channels is not None else self.source.n_channels
        if self.n_channels < self.source.n_channels:
            raise ValueError(
                f"{self.source.path}: n_channels {self.n_channels} < the file's {self.source.n_channels} channels"
            )
        self.pad_value = float(pad_value)
        self.dataset_index = int(dataset_index)
        self.nan_policy = nan_policy
        self.samples = _as_samples(samples, self.source.n_samples, self.source.path)

        length = self.t_in + self.t_out
        if self.source.n_steps < length:
            raise ValueError(
                f"{self.source.path}: trajectories have T = {self.source.n_steps} frames, fewer than "
                f"t_in + t_out = {length}"
            )
        starts = np.arange(0, self.source.n_steps - length + 1, self.stride)
        self.skipped_windows = 0
        if nan_policy == "skip":
            self._index = self._finite_windows(starts, length)
        else:
            self._index = np.stack(np.meshgrid(self.samples, starts, indexing="ij"), -1).reshape(-1, 2)

    def _finite_windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        kept, total = [], 0
        for sample in self.samples:
            ok = self.source.finite_frames(int(sample))
            bad_before = np.concatenate([[0], np.cumsum(~ok)])  # non-finite frames in [0, t)
            clean = bad_before[starts + length] - bad_before[starts] == 0
            kept.append(np.stack([np.full(clean.sum(), sample), starts[clean]], -1))
            total += len(starts)
        index = np.concatenate(kept).astype(np.int64) if kept else np.zeros((0, 2), np.int64)
        self.skipped_windows = total - len(index)
        if self.skipped_windows:
            warnings.warn(
                f"{self.source.path}: skipped {self.skipped_windows} of {total} windows that contain "
                "NaN/Inf frames",
                RuntimeWarning,
                stacklevel=3,
            )
        return index

    def __len__(self) -> int:
        return len(self._index)

    def window_position(self, i: int) -> tuple[int, int]:
        """(sample, first frame) of window ``i``."""
        sample, start = self._index[i]
        return int(sample), int(start)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        sample, start = self.window_position(i)
        frames = torch.from_numpy(self.source.read(sample, start, start + self.t_in + self.t_out))
        frames, mask = pad_channels(resize(frames, self.resolution), self.n_channels, self.pad_value)
        return {
            "x": frames[..., : self.t_in, :],
            "y": frames[..., self.t_in :, :],
            "mask": mask,
            "dataset": torch.tensor(self.dataset_index, dtype=torch.int64),
        }


class TrajectoryDataset(Dataset):
    """Whole trajectories for rollout evaluation, resized and padded like :class:`WindowDataset`.

    Item ``i`` is a dict: ``trajectory`` ``[*R, T, C_max]`` float32 (frames ``t_start`` to
    ``t_start + n_steps``), ``mask`` ``[C_max]`` bool, ``dataset`` ``[]`` int64. A rollout takes
    the first ``t_in`` frames as input and compares the rest.
    """

    def __init__(
        self,
        source: TrajectorySource | str | os.PathLike,
        *,
        resolution: int | Sequence[int] | None = None,
        n_channels: int | None = None,
        pad_value: float = 1.0,
        samples: Sequence[int] | range | None = None,
        t_start: int = 0,
        n_steps: int | None = None,
        layout: str | None = None,
        dataset_index: int = 0,
    ):
        self.source = _as_source(source, layout)
        n_spatial = len(self.source.spatial_shape)
        self.resolution = as_size(resolution, n_spatial) if resolution is not None else tuple(self.source.spatial_shape)
        self.n_channels = int(n_channels) if n_channels is not None else self.source.n_channels
        self.pad_value = float(pad_value)
        self.samples = _as_samples(samples, self.source.n_samples, self.source.path)
        self.t_start = int(t_start)
        self.t_stop = self.source.n_steps if n_steps is None else self.t_start + int(n_steps)
        if not 0 <= self.t_start < self.t_stop <= self.source.n_steps:
            raise ValueError(f"{self.source.path}: frames {self.t_start}:{self.t_stop} outside [0, {self.source.n_steps}]")
        self.dataset_index = int(dataset_index)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        frames = torch.from_numpy(self.source.read(int(self.samples[i]), self.t_start, self.t_stop))
        frames, mask = pad_channels(resize(frames, self.resolution), self.n_channels, self.pad_value)
        return {"trajectory": frames, "mask": mask, "dataset": torch.tensor(self.dataset_index, dtype=torch.int64)}


def train_test_split(n_samples: int, test_fraction: float = 0.1, n_test: int | None = None) -> tuple[range, range]:
    """Split ``range(n_samples)`` into (train, test): the last samples are the test set, as in
    FNO's and DPOT's files. ``n_test`` overrides ``test_fraction``; at least one sample is
    kept for each side when ``n_samples >= 2``."""
    if n_test is None:
        n_test = int(round(test_fraction * n_samples))
        if n_samples >= 2:
            n_test = min(max(n_test, 1), n_samples - 1)
    if not 0 <= n_test <= n_samples:
        raise ValueError(f"n_test = {n_test} not in [0, {n_samples}]")
    return range(0, n_samples - n_test), range(n_samples - n_test, n_samples)

"""PyTorch datasets over one trajectory file: its trajectories (and their train/test split), and the
training windows cut from them.

Windows resize space to a common resolution and pad channels to a common count (with a mask), so
that datasets of different PDEs can be mixed (:mod:`opzoo.data.mixture`).
"""

from __future__ import annotations

import os
import warnings
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from opzoo.data.errors import DataFormatError
from opzoo.data.readers import TrajectorySource, open_source
from opzoo.data.transforms import as_size, pad_channels, resize

NAN_POLICIES = ("raise", "skip")


def _as_samples(samples: Sequence[int] | range | None, n: int, path: str) -> np.ndarray:
    index = np.arange(n) if samples is None else np.asarray(list(samples), dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() >= n):
        raise IndexError(f"{path}: samples must lie in [0, {n}); got {index.min()}..{index.max()}")
    return index


class TrajectoryDataset(Dataset):
    """The trajectories of one file (all of them, or the subset ``indices``), read lazily through
    :func:`opzoo.data.open_source` (canonical HDF5 or any layout it detects).

    Item ``i`` is trajectory ``indices[i]`` as ``[*S, T, C]`` float32; :meth:`read` gives a frame range.
    Frames are returned as the file holds them (no resize, no padding: :class:`FrameShape` does that
    for a model). Subsets (:meth:`subset`, :func:`split_trajectories`) share the open file.
    ``check_finite=False`` (the default here) leaves NaN/Inf to the caller, e.g. the trainer's per-step
    loss check, which names the step and the dataset.
    """

    def __init__(self, source: TrajectorySource | str | os.PathLike, layout: str | None = None,
                 indices: Sequence[int] | None = None, *, check_finite: bool = False,
                 fields: Sequence[str] | None = None):
        self.source = source if isinstance(source, TrajectorySource) else open_source(
            source, layout=layout, check_finite=check_finite, **({"fields": list(fields)} if fields else {}))
        self.path, self.layout = self.source.path, layout
        if len(self.shape) < 4:
            raise DataFormatError(f"{self.path}: trajectories shaped {list(self.shape[1:])}; expected [*S, T, C] "
                                  "with 1-3 spatial dims")
        self.indices = list(range(self.shape[0])) if indices is None else [int(i) for i in _as_samples(
            indices, self.shape[0], self.path)]

    def select_channels(self, names: Sequence[str], fill: float | None = None) -> list[str]:
        """Read only the channels ``names``, in that order, matched by name (e.g. a model's
        ``pretrained_cfg['fields']``; ``fill``: the value of a name the file lacks, else it is refused):
        :meth:`opzoo.data.TrajectorySource.select_channels`. Subsets sharing the file share the selection.
        Returns the names filled."""
        return self.source.select_channels(list(names), fill)

    def subset(self, indices: Sequence[int]) -> "TrajectoryDataset":
        """The trajectories ``indices`` (of the file) of this file, on the same open file."""
        return TrajectoryDataset(self.source, self.layout, indices)

    @property
    def shape(self) -> tuple[int, ...]:
        """``(N_file, *S, T, C)`` as the file is read (after a field map: its channels and grid)."""
        return tuple(self.source.shape)

    @property
    def channel_names(self) -> list[str]:
        return list(self.source.fields)

    @property
    def present(self) -> list[bool]:
        """Per channel: True where it holds the file's data, False where it is a fill value (a field the file lacks,
        read as its model was trained with it)."""
        return self.source.present

    def frames(self, i: int, shape, t0: int = 0, t1: int | None = None):
        """Frames ``t0:t1`` of trajectory ``i`` brought to a model's ``shape`` (:class:`FrameShape`): ``(frames
        [*R, t, C_model], mask [C_model])``, the mask False for padding and fill values."""
        return shape.frames(self.read(i, t0, t1), self.present)

    @property
    def spatial(self) -> tuple[int, ...]:
        return self.shape[1:-2]

    @property
    def n_steps(self) -> int:
        return self.shape[-2]

    @property
    def channels(self) -> int:
        return self.shape[-1]

    @property
    def periodic(self) -> bool | None:
        """Whether the file states periodic boundaries (None: it does not say); ``boundary`` is its own words."""
        return self.source.info.periodic

    @property
    def boundary(self) -> str | None:
        return self.source.info.boundary

    @property
    def axis_boundaries(self) -> tuple[str, ...] | None:
        """Each spatial axis's boundary as the file states it (:attr:`opzoo.data.SourceInfo.axis_boundaries`)."""
        return self.source.info.axis_boundaries

    def __len__(self) -> int:
        return len(self.indices)

    def read(self, i: int, t0: int = 0, t1: int | None = None) -> torch.Tensor:
        """Frames ``t0:t1`` of trajectory ``i`` (of this subset): ``[*S, t1-t0, C]`` float32."""
        x = self.source.read(self.indices[i], t0, t1)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.read(i)


class WindowDataset(Dataset):
    """Training windows from one file: ``t_in`` frames and the ``t_out`` frames after them.

    Item ``i`` is a dict of tensors:

    * ``x``: ``[*R, t_in, C_max]`` float32 input frames
    * ``y``: ``[*R, t_out, C_max]`` float32 target frames
    * ``mask``: ``[C_max]`` bool, True for real channels (padding is ``pad_value``)
    * ``dataset``: ``[]`` int64, ``dataset_index`` (its position in a mixture)

    where ``R`` is ``resolution`` (or the file's ``S``) and ``C_max`` is ``n_channels`` (or the
    file's ``C``). Windows start every ``stride`` frames. ``samples`` restricts the trajectories
    (a :class:`TrajectoryDataset` brings its own: e.g. the train split). ``nan_policy="raise"`` fails on a window with NaN/Inf naming the file,
    key, sample and frames; ``"skip"`` scans the file once at construction, leaves out every window
    touching a non-finite frame and warns with the count (``self.skipped_windows``).
    """

    def __init__(
        self,
        source: "TrajectoryDataset | TrajectorySource | str | os.PathLike",
        t_in: int = 10,
        t_out: int = 1,
        *,
        resolution: int | Sequence[int] | None = None,
        n_channels: int | None = None,
        pad_value: float = 1.0,
        resample: str = "bilinear",
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
        if isinstance(source, TrajectoryDataset):
            source, samples = source.source, source.indices if samples is None else samples
        self.source = source if isinstance(source, TrajectorySource) else open_source(source, layout=layout)
        self.t_in, self.t_out, self.stride = int(t_in), int(t_out), int(stride)
        n_spatial = len(self.source.spatial_shape)
        self.resolution = as_size(resolution, n_spatial) if resolution is not None else tuple(self.source.spatial_shape)
        self.n_channels = int(n_channels) if n_channels is not None else self.source.n_channels
        if self.n_channels < self.source.n_channels:
            raise ValueError(
                f"{self.source.path}: n_channels {self.n_channels} < the file's {self.source.n_channels} channels"
            )
        self.pad_value = float(pad_value)
        self.resample = resample
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
        frames, mask = pad_channels(resize(frames, self.resolution, self.resample), self.n_channels, self.pad_value,
                                    self.source.present)
        return {
            "x": frames[..., : self.t_in, :],
            "y": frames[..., self.t_in :, :],
            "mask": mask,
            "dataset": torch.tensor(self.dataset_index, dtype=torch.int64),
        }


def train_test_split(n_samples: int, test_fraction: float = 0.1, n_test: int | None = None) -> tuple[range, range]:
    """Split ``range(n_samples)`` into (train, test): the last samples are the test set, as in
    FNO's and DPOT's files. The test set holds ``n_test`` samples, or ``round(test_fraction *
    n_samples)`` and at least one; the training set must keep at least one (ValueError otherwise)."""
    if n_test is None:
        n_test = max(1, int(round(test_fraction * n_samples)))
    if not 0 <= n_test < n_samples:
        raise ValueError(f"{n_samples} trajectories are too few to hold out {n_test} for testing "
                         f"(test_fraction {test_fraction:.0%}) and keep one for training")
    return range(0, n_samples - n_test), range(n_samples - n_test, n_samples)


def split_trajectories(trajectories: TrajectoryDataset, test_fraction: float = 0.1,
                       n_test: int | None = None) -> tuple[TrajectoryDataset, TrajectoryDataset]:
    """(train, test) subsets of one file's trajectories by :func:`train_test_split`, on the same open file."""
    try:
        train, test = train_test_split(len(trajectories), test_fraction, n_test)
    except ValueError as e:
        raise DataFormatError(f"{trajectories.path}: {e}") from None
    return trajectories.subset([trajectories.indices[i] for i in train]), \
        trajectories.subset([trajectories.indices[i] for i in test])

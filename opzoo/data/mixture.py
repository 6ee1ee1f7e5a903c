"""The multi-dataset mixture used for pretraining (DPOT section 3.3).

Every dataset is resized to one resolution and padded to the widest channel count (pad value 1.0,
with a mask), cut into windows of ``t_in`` frames -> the next ``t_out`` frames, and sampled with
per-dataset weights by :class:`opzoo.data.sampler.BalancedSampler`.

Typical use::

    specs = [DataSpec("ns_1e-3.h5"), DataSpec("swe.h5", weight=3), DataSpec("dr.h5", weight=3)]
    train = make_mixture(specs, t_in=10, resolution=128, split="train")
    sampler = BalancedSampler(train, seed=0)          # DDP-aware
    loader = DataLoader(train, batch_size=32, sampler=sampler, num_workers=4)
    tests = make_trajectory_sets(specs, resolution=128, split="test")   # one per dataset
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from opzoo.data.datasets import TrajectoryDataset, WindowDataset, train_test_split
from opzoo.data.readers import TrajectorySource, open_source
from opzoo.data.transforms import pad_channels

SPLITS = ("train", "test", "all")


@dataclass
class DataSpec:
    """One dataset of a mixture: a file, its sampling weight, and how to split it.

    ``n_test`` (or ``test_fraction``) last trajectories form the test split.
    """

    path: str | os.PathLike
    weight: float = 1.0
    layout: str | None = None
    test_fraction: float = 0.1
    n_test: int | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name or os.path.splitext(os.path.basename(os.fspath(self.path)))[0]


class MixtureDataset(Dataset):
    """Concatenation of :class:`WindowDataset` s that share resolution, ``t_in`` and ``t_out``.

    Item ``i`` (global index over all windows, datasets in order) is the window dict of its dataset
    with ``x`` ``[*R, t_in, C_max]``, ``y`` ``[*R, t_out, C_max]``, ``mask`` ``[C_max]`` and
    ``dataset`` = the dataset's position here; channels are padded again to the widest dataset if
    needed. ``weights[k]`` is the sampling weight of dataset ``k`` (used by BalancedSampler).
    """

    def __init__(
        self,
        datasets: Sequence[WindowDataset],
        weights: Sequence[float] | None = None,
        names: Sequence[str] | None = None,
    ):
        if not datasets:
            raise ValueError("a mixture needs at least one dataset")
        self.datasets = list(datasets)
        self.weights = [1.0] * len(self.datasets) if weights is None else [float(w) for w in weights]
        if len(self.weights) != len(self.datasets) or any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError(
                f"weights {self.weights} must be {len(self.datasets)} non-negative numbers with a positive sum"
            )
        self.names = list(names) if names is not None else [os.path.basename(d.source.path) for d in self.datasets]
        first = self.datasets[0]
        for d in self.datasets[1:]:
            if (d.resolution, d.t_in, d.t_out) != (first.resolution, first.t_in, first.t_out):
                found = "; ".join(
                    f"{os.path.basename(x.source.path)}: resolution {x.resolution}, t_in {x.t_in}, t_out {x.t_out}"
                    for x in self.datasets
                )
                raise ValueError(f"datasets of a mixture must share resolution, t_in and t_out: {found}")
        for k, d in enumerate(self.datasets):
            if len(d) == 0 and self.weights[k] > 0:
                raise ValueError(
                    f"{d.source.path}: no windows (after splitting / NaN skipping) but weight {self.weights[k]}"
                )
        self.n_channels = max(d.n_channels for d in self.datasets)
        self.pad_value = first.pad_value
        self.offsets = np.concatenate([[0], np.cumsum([len(d) for d in self.datasets])]).astype(np.int64)

    @property
    def resolution(self) -> tuple[int, ...]:
        return self.datasets[0].resolution

    @property
    def sizes(self) -> list[int]:
        """Number of windows per dataset."""
        return [len(d) for d in self.datasets]

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def window_probabilities(self) -> torch.Tensor:
        """``[len(self)]`` float64: each window's probability under balanced sampling, ``w_k / (Σw · |D_k|)``."""
        total = sum(self.weights)
        return torch.cat([
            torch.full((len(d),), w / (total * len(d)) if len(d) else 0.0, dtype=torch.float64)
            for d, w in zip(self.datasets, self.weights)
        ])

    def locate(self, i: int) -> tuple[int, int]:
        """Global index -> (dataset index, index inside that dataset)."""
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range [0, {len(self)})")
        k = bisect.bisect_right(self.offsets, i) - 1
        return k, int(i - self.offsets[k])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        k, j = self.locate(int(i))
        item = self.datasets[k][j]
        if item["mask"].numel() < self.n_channels:
            real = int(item["mask"].sum())
            x, mask = pad_channels(item["x"][..., :real], self.n_channels, self.pad_value)
            y, _ = pad_channels(item["y"][..., :real], self.n_channels, self.pad_value)
            item = {"x": x, "y": y, "mask": mask}
        item["dataset"] = torch.tensor(k, dtype=torch.int64)
        return item


def _split_samples(source: TrajectorySource, spec: DataSpec, split: str) -> range:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "all":
        return range(source.n_samples)
    train, test = train_test_split(source.n_samples, spec.test_fraction, spec.n_test)
    return train if split == "train" else test


def _open_all(specs: Sequence[DataSpec | str]) -> tuple[list[DataSpec], list[TrajectorySource]]:
    specs = [s if isinstance(s, DataSpec) else DataSpec(s) for s in specs]
    sources = [open_source(s.path, layout=s.layout) for s in specs]
    dims = {len(s.spatial_shape) for s in sources}
    if len(dims) > 1:
        raise ValueError(
            "a mixture needs the same number of spatial dims in every file: "
            + ", ".join(f"{s.path}: S = {list(s.spatial_shape)}" for s in sources)
        )
    return specs, sources


def make_mixture(
    specs: Sequence[DataSpec | str],
    *,
    t_in: int = 10,
    t_out: int = 1,
    resolution: int | Sequence[int] | None = 128,
    split: str = "train",
    stride: int = 1,
    pad_value: float = 1.0,
    nan_policy: str = "raise",
) -> MixtureDataset:
    """Open every file in ``specs`` and build the training mixture over its ``split``.

    ``resolution=None`` keeps the files' own grid (they must then agree). Channels are padded to
    the widest file. Returns a :class:`MixtureDataset` whose ``weights`` come from the specs.
    """
    specs, sources = _open_all(specs)
    n_channels = max(s.n_channels for s in sources)
    if resolution is None:
        shapes = {tuple(s.spatial_shape) for s in sources}
        if len(shapes) > 1:
            raise ValueError(f"files have different grids {sorted(shapes)}; pass resolution= to resize them")
    datasets = [
        WindowDataset(
            source, t_in, t_out, resolution=resolution, n_channels=n_channels, pad_value=pad_value,
            samples=_split_samples(source, spec, split), stride=stride, nan_policy=nan_policy, dataset_index=k,
        )
        for k, (spec, source) in enumerate(zip(specs, sources))
    ]
    return MixtureDataset(datasets, [s.weight for s in specs], [s.label for s in specs])


def make_trajectory_sets(
    specs: Sequence[DataSpec | str],
    *,
    resolution: int | Sequence[int] | None = 128,
    split: str = "test",
    pad_value: float = 1.0,
) -> list[TrajectoryDataset]:
    """One :class:`TrajectoryDataset` per file (its ``split``), resized and padded as the mixture."""
    specs, sources = _open_all(specs)
    n_channels = max(s.n_channels for s in sources)
    return [
        TrajectoryDataset(
            source, resolution=resolution, n_channels=n_channels, pad_value=pad_value,
            samples=_split_samples(source, spec, split), dataset_index=k,
        )
        for k, (spec, source) in enumerate(zip(specs, sources))
    ]

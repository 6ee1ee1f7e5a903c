"""The multi-dataset mixture used for pretraining (DPOT section 3.3).

Every dataset is resized to one resolution and padded to the widest channel count (pad value 1.0,
with a mask), cut into windows of ``t_in`` frames -> the next ``t_out`` frames
(:class:`~opzoo.data.datasets.WindowDataset`), and drawn with per-dataset weights by
:class:`opzoo.data.sampler.StepBatchSampler` from :meth:`MixtureDataset.window_probabilities`.
The trainer builds it from a run config (``opzoo.training.build.build_data``)::

    parts = [WindowDataset(train, 10, 1, resolution=(128, 128), n_channels=4, dataset_index=k)
             for k, train in enumerate(train_splits)]
    mixture = MixtureDataset(parts, weights=[1, 3, 3])
"""

from __future__ import annotations

import bisect
import os
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from opzoo.data.datasets import WindowDataset
from opzoo.data.transforms import pad_channels


class MixtureDataset(Dataset):
    """Concatenation of :class:`WindowDataset` s that share resolution, ``t_in`` and ``t_out``.

    Item ``i`` (global index over all windows, datasets in order) is the window dict of its dataset
    with ``x`` ``[*R, t_in, C_max]``, ``y`` ``[*R, t_out, C_max]``, ``mask`` ``[C_max]`` and
    ``dataset`` = the dataset's position here; channels are padded again to the widest dataset if
    needed. ``weights[k]`` is the sampling weight of dataset ``k`` (the sampler's, through :meth:`window_probabilities`).
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

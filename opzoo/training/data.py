"""Training data on top of opzoo.data: train/test splits of each file, the adaptation of frames to
the model, and a batch sampler that is deterministic per step and DDP-aware (DESIGN §7).

Windows and the mixture are opzoo.data's ``WindowDataset`` and ``MixtureDataset``. The sampler here
draws each *step's* global batch from (seed, step) with the mixture's balanced probabilities, which
is what makes resume exact and a W-rank run equal to one process with the same global batch
(opzoo.data's BalancedSampler draws per epoch instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from ..data import DataFormatError, open_source, pad_channels, resize
from ..errors import ConfigError


class H5Trajectories:
    """A file read lazily through :func:`opzoo.data.open_source` (canonical HDF5 or any layout it
    detects: PDEBench, FNO .mat, The Well) as trajectories ``[*S, T, C]``; a subset by index.

    Windows are read with ``check_finite=False``: non-finite values are caught by the trainer's
    per-step loss check, which names the step and the dataset.
    """

    def __init__(self, path: str, layout: str | None = None, indices: Sequence[int] | None = None):
        self.path, self.layout = path, layout
        try:
            self.source = open_source(path, layout=layout, check_finite=False)
        except (DataFormatError, ValueError, OSError) as e:
            raise ConfigError(str(e) if str(e).startswith(str(path)) else f"{path}: {e}") from None
        self.shape = tuple(self.source.shape)
        if len(self.shape) < 4:
            raise ConfigError(f"{path}: trajectories shaped {list(self.shape[1:])}; expected [*S, T, C] with 1-3 spatial dims")
        self.indices = list(range(self.shape[0])) if indices is None else list(indices)

    def select_channels(self, names: Sequence[str]) -> None:
        """Read only the channels ``names``, in that order, matched by name (e.g. a model's
        ``pretrained_cfg['fields']``): :meth:`opzoo.data.TrajectorySource.select_channels`."""
        try:
            self.source.select_channels(list(names))
        except DataFormatError as e:
            raise ConfigError(str(e)) from None
        self.shape = tuple(self.source.shape)

    def subset(self, indices: Sequence[int]) -> "H5Trajectories":
        """The trajectories ``indices`` of this file, read with the same channel selection."""
        part = H5Trajectories(self.path, self.layout, indices)
        if self.source.selected_channels:
            part.select_channels(self.channel_names)
        return part

    @property
    def channel_names(self) -> list[str]:
        return list(self.source.fields)

    @property
    def spatial(self) -> tuple[int, ...]:
        return self.shape[1:-2]

    @property
    def n_steps(self) -> int:
        return self.shape[-2]

    @property
    def channels(self) -> int:
        return self.shape[-1]

    def __len__(self) -> int:
        return len(self.indices)

    def read(self, i: int, t0: int = 0, t1: int | None = None) -> Tensor:
        """Frames ``t0:t1`` of trajectory ``i`` (of this subset): ``[*S, t1-t0, C]`` float32."""
        x = self.source.read(self.indices[i], t0, t1)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def split(path: str, layout: str | None, test_path: str | None, test_fraction: float) -> tuple[H5Trajectories, H5Trajectories]:
    """Train and test trajectories: a separate test file, or the last ``test_fraction`` of the file."""
    if test_path is not None:
        return H5Trajectories(path, layout), H5Trajectories(test_path, layout)
    n = H5Trajectories(path, layout).shape[0]
    n_test = max(1, int(round(n * test_fraction)))
    if n_test >= n:
        raise ConfigError(f"{path}: {n} trajectories are too few to hold out {test_fraction:.0%} for testing")
    return H5Trajectories(path, layout, range(n - n_test)), H5Trajectories(path, layout, range(n - n_test, n))


@dataclass
class Adapt:
    """How a dataset is brought to the model: spatial ``resolution`` and ``channels`` (padded, masked)."""

    resolution: tuple[int, ...]
    channels: int
    in_timesteps: int
    out_timesteps: int = 1

    def frames(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = resize(x, self.resolution)
        if x.shape[-1] > self.channels:
            raise ConfigError(f"data has {x.shape[-1]} channels but the model takes {self.channels}")
        return pad_channels(x, self.channels)


class StepBatchSampler(torch.utils.data.Sampler):
    """Per-step batches: global batch ``b`` of step ``s`` is drawn with a generator seeded by
    ``(seed, s)`` from the mixture's probabilities; rank ``r`` of ``W`` takes rows ``r·b/W .. (r+1)·b/W``.

    The draw depends only on (seed, step), so a resumed run sees the same batches and a W-rank run
    sees exactly the batches of one process, split.
    """

    def __init__(self, probabilities: Tensor, global_batch: int, seed: int, start: int, stop: int,
                 rank: int = 0, world_size: int = 1, salt: int = 0):
        if global_batch % world_size:
            raise ConfigError(f"training.batch_size {global_batch} is not divisible by the {world_size} ranks")
        self.p, self.b, self.seed, self.start, self.stop = probabilities, global_batch, seed, start, stop
        self.rank, self.world, self.salt = rank, world_size, salt

    def global_indices(self, step: int) -> Tensor:
        g = step_generator(self.seed, step, self.salt)
        return torch.multinomial(self.p, self.b, replacement=True, generator=g)

    def __iter__(self) -> Iterator[list[int]]:
        per = self.b // self.world
        for step in range(self.start, self.stop):
            idx = self.global_indices(step)
            yield idx[self.rank * per:(self.rank + 1) * per].tolist()

    def __len__(self) -> int:
        return self.stop - self.start


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    """A CPU generator determined by (seed, step, salt): batches and noise are reproducible per step."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + salt * 104_729) % (2**63 - 1))


def collate(items: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}



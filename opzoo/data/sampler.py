"""Balanced, seeded, DDP-aware sampling over a :class:`MixtureDataset`."""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler

from opzoo.data.mixture import MixtureDataset


def _distributed_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if world_size is None:
        world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if rank is None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} not in [0, {world_size})")
    return int(rank), int(world_size)


class BalancedSampler(Sampler[int]):
    """Draws global mixture indices with dataset ``k`` chosen with probability ``w_k / sum(w)``
    and a window uniformly inside it.

    This is DPOT's balanced sampling: each window of dataset ``k`` has probability
    ``w_k / (|D_k| sum(w))`` (DPOT's eq. 4 up to its constant 1/K), so how often a dataset is
    seen depends on its weight, not its size. Draws are with replacement.

    Every epoch draws one global sequence of ``num_samples`` indices (rounded up to a multiple of
    ``world_size``) from a generator seeded by ``(seed, epoch)``; rank ``r`` takes positions
    ``r, r + world_size, ...``, so ranks see disjoint shares of the same sequence. ``rank`` and
    ``world_size`` default to torch.distributed's when it is initialised, else 0 and 1. Call
    ``set_epoch(e)`` each epoch, as with DistributedSampler. ``num_samples`` defaults to
    ``len(mixture)`` (one epoch = as many draws as there are windows).
    """

    def __init__(
        self,
        mixture: MixtureDataset,
        num_samples: int | None = None,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ):
        self.mixture = mixture
        self.rank, self.world_size = _distributed_defaults(rank, world_size)
        self.seed = int(seed)
        self.epoch = 0
        total = len(mixture) if num_samples is None else int(num_samples)
        if total < 1:
            raise ValueError(f"num_samples must be >= 1, got {total}")
        self.total_size = math.ceil(total / self.world_size) * self.world_size
        sizes = np.asarray(mixture.sizes, dtype=np.int64)
        weights = np.asarray(mixture.weights, dtype=np.float64) * (sizes > 0)
        self.probabilities = weights / weights.sum()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def global_sequence(self) -> np.ndarray:
        """The whole ``[total_size]`` index sequence of this epoch (identical on every rank)."""
        rng = np.random.default_rng([self.seed, self.epoch])
        datasets = rng.choice(len(self.probabilities), size=self.total_size, p=self.probabilities)
        sizes = np.asarray(self.mixture.sizes, dtype=np.int64)
        local = np.floor(rng.random(self.total_size) * sizes[datasets]).astype(np.int64)
        return self.mixture.offsets[datasets] + local

    def __iter__(self) -> Iterator[int]:
        return iter(self.global_sequence()[self.rank :: self.world_size].tolist())

    def __len__(self) -> int:
        return self.total_size // self.world_size

"""The batch sampler of training: each step's global batch drawn from (seed, step), balanced over the
mixture's datasets, DDP-aware (docs/training.md)."""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
from torch import Tensor

from opzoo.errors import ConfigError


class StepBatchSampler(torch.utils.data.Sampler):
    """Per-step batches: global batch ``b`` of step ``s`` is drawn with a generator seeded by
    ``(seed, s)`` from ``probabilities`` (a mixture's :meth:`~opzoo.data.MixtureDataset.window_probabilities`:
    DPOT's balanced sampling, each window of dataset ``k`` with probability ``w_k / (Σw · |D_k|)``);
    rank ``r`` of ``W`` takes rows ``r·b/W .. (r+1)·b/W``.

    The draw depends only on (seed, step), so a resumed run sees the same batches and a W-rank run
    sees exactly the batches of one process, split. Draws are with replacement.
    """

    def __init__(self, probabilities: Tensor, global_batch: int, seed: int, start: int, stop: int,
                 rank: int = 0, world_size: int = 1, salt: int = 0):
        if global_batch % world_size:
            raise ConfigError(f"training.batch_size {global_batch} is not divisible by the {world_size} ranks")
        if not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} not in [0, {world_size})")
        self.p, self.b, self.seed, self.start, self.stop = probabilities, global_batch, seed, start, stop
        self.rank, self.world, self.salt = rank, world_size, salt

    def global_indices(self, step: int) -> Tensor:
        """``[b]`` int64: the global batch of ``step`` (identical on every rank)."""
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
    """Window dicts -> one dict of stacked tensors (a leading batch axis)."""
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}

"""The batches of a run: each step's global batch and denoising noise drawn from (seed, step), so that a
resumed run and a W-rank run see exactly the batches of one uninterrupted process (docs/training.md)."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

from ..data import MixtureDataset, StepBatchSampler, collate, step_generator
from .distributed import DistEnv

NOISE_SALT, FRESH_SALT = 1, 2
FRESH_INDEX_SALT = 1000  # fresh batch k >= 1 of a step uses salt 1000 + k


class RunBatches:
    """Batches of ``mixture`` for this rank: ``batch_size`` is the global batch, split over ``env``'s ranks."""

    def __init__(self, mixture: MixtureDataset, batch_size: int, seed: int, env: DistEnv, device: torch.device,
                 num_workers: int = 0):
        self.mixture, self.batch_size, self.seed, self.env, self.device = mixture, batch_size, seed, env, device
        self.num_workers = num_workers

    def sampler(self, start: int, stop: int, salt: int = 0) -> StepBatchSampler:
        return StepBatchSampler(self.mixture.window_probabilities(), self.batch_size, self.seed, start, stop,
                                self.env.rank, self.env.world_size, salt)

    def from_step(self, start: int, stop: int) -> Iterator[dict[str, Tensor]]:
        """This rank's batches of steps ``start .. stop-1``, on the device."""
        loader = torch.utils.data.DataLoader(self.mixture, batch_sampler=self.sampler(start, stop), collate_fn=collate,
                                             num_workers=self.num_workers, persistent_workers=False,
                                             pin_memory=self.device.type == "cuda")
        for batch in loader:
            yield {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def fresh(self, step: int, index: int = 0) -> dict[str, Tensor]:
        """Fresh batch ``index`` of ``step`` (a function of (seed, step, index), never a training batch)."""
        if index < 0:
            raise ValueError(f"fresh_batch: index must be >= 0, got {index}")
        salt = FRESH_SALT if index == 0 else FRESH_INDEX_SALT + index
        idx = next(iter(self.sampler(step, step + 1, salt)))
        batch = collate([self.mixture[i] for i in idx])
        return {k: v.to(self.device) for k, v in batch.items()}

    def noise(self, step: int, x: Tensor) -> Tensor:
        """``randn`` shaped like ``x``: this rank's rows of one global-batch draw (noise does not depend on
        the rank count)."""
        per = x.shape[0]
        shape = (per * self.env.world_size, *x.shape[1:])
        z = torch.randn(shape, generator=step_generator(self.seed, step, NOISE_SALT))
        return z[self.env.rank * per:(self.env.rank + 1) * per].to(self.device)

    def global_indices(self, step: int) -> list[int]:
        """The mixture indices of ``step``'s global batch (every rank's rows)."""
        return self.sampler(step, step + 1).global_indices(step).tolist()

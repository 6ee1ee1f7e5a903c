"""What went wrong in a training step, named: NaN/Inf in the data (file and trajectory), a non-finite loss or
gradient (which datasets), a loss running away from its start (divergence)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from ..data import MixtureDataset
from ..data.errors import NonFiniteDataError
from ..errors import OpzooError
from ..evaluation.bad_data import OVERFLOW, bad_windows_message, non_finite_in
from .distributed import DistEnv, all_reduce_max
from .logger import RunLogger, read_log

#: A finite loss above this multiple of the run's first loss is flagged as divergence (log and summary).
DIVERGENCE_FACTOR = 100.0


class TrainingDivergedError(OpzooError):
    """A non-finite loss or gradient; the run stops and the last good checkpoint is kept."""


def batch_has_bad_data(batch: Mapping[str, Tensor], env: DistEnv) -> bool:
    """Some rank's batch holds NaN/Inf, or values whose squares overflow float32 (collective: every rank
    calls it after a non-finite loss)."""
    bad = ~(torch.isfinite(batch["x"]).all() & torch.isfinite(batch["y"]).all()) | \
        (batch["x"].abs().amax() >= OVERFLOW) | (batch["y"].abs().amax() >= OVERFLOW)
    return bool(all_reduce_max(bad.float().reshape(1), env)[0] > 0)


def raise_bad_data(mixture: MixtureDataset, indices: Sequence[int], step: int, logger: RunLogger) -> None:
    """The global batch (mixture ``indices``) of ``step`` holds NaN/Inf: log and raise naming the file,
    trajectory and count."""
    found = []
    for index in dict.fromkeys(indices):
        k, j = mixture.locate(int(index))
        part = mixture.datasets[k]
        sample, t0 = part.window_position(j)
        window = part.source.read(sample, t0, t0 + part.t_in + part.t_out)
        if non_finite_in(np.asarray(window))[0]:
            found.append((part.source, sample))
    msg = bad_windows_message(found, step) if found else \
        f"non-finite values in the training batch of step {step} after resizing/padding the data"
    logger.log({"kind": "error", "step": step, "message": msg}, flush=True)
    raise NonFiniteDataError(msg)


def raise_diverged(what: str, value: float, step: int, per_sample: Tensor, dataset: Tensor, names: Sequence[str],
                   env: DistEnv, last_checkpoint: str, logger: RunLogger) -> None:
    """A non-finite ``what`` (loss, gradient norm) at ``step``: log and raise naming the datasets whose
    samples were non-finite on any rank (``per_sample [B]``, ``dataset [B]`` this rank's)."""
    bad = (~torch.isfinite(per_sample)).float()
    flags = torch.zeros(len(names), device=per_sample.device)
    flags.index_add_(0, dataset.to(per_sample.device), bad)
    flags = all_reduce_max(flags, env)
    present = torch.zeros(len(names), device=per_sample.device)
    present.index_add_(0, dataset.to(per_sample.device), torch.ones_like(bad))
    present = all_reduce_max(present, env)
    culprits = [n for n, f in zip(names, flags.tolist()) if f > 0]
    everywhere = [n for n, p in zip(names, present.tolist()) if p > 0]
    # the data are checked finite before each step: a non-finite loss is the model's, not a dataset's
    where = (f"on every dataset in the batch ({', '.join(everywhere)}): the model diverged"
             if not culprits or culprits == everywhere else f"on dataset(s) {', '.join(culprits)}")
    msg = (f"non-finite {what} ({value}) at step {step} (iteration {step - 1}) {where}; "
           f"stopping. Last good checkpoint: {last_checkpoint}")
    logger.log({"kind": "error", "step": step, "message": msg}, flush=True)
    raise TrainingDivergedError(msg)


class DivergenceWatch:
    """Flags the first finite loss above ``DIVERGENCE_FACTOR`` x the run's first loss (``initial``, read back
    from the log on resume); :meth:`update` returns the message once."""

    def __init__(self, initial: float | None = None):
        self.initial, self.message = initial, None

    @classmethod
    def resumed(cls, log_path: Path, start: int) -> "DivergenceWatch":
        """A watch for a run starting at ``start``: on resume, the first loss is read back from ``log_path``."""
        if start == 0 or not log_path.is_file():
            return cls()
        first = next((r.get("loss") for r in read_log(log_path)), None)
        return cls(first if isinstance(first, (int, float)) and math.isfinite(first) else None)

    def update(self, step: int, loss: float) -> str | None:
        if self.initial is None:
            self.initial = loss
        elif self.message is None and loss > DIVERGENCE_FACTOR * self.initial:
            self.message = (f"loss {loss:.4g} at step {step} is over {DIVERGENCE_FACTOR:g}x the first "
                            f"loss {self.initial:.4g} (step 1): the run is diverging (lower optimizer.lr?)")
            return self.message
        return None

"""Which weights a run keeps: with ``training.selection: validation``, the evaluated step whose validation error is
lowest, and (``training.early_stopping``) when to stop for lack of improvement.

Poseidon keeps the checkpoint that is best on its validation split and stops early (transformers'
``load_best_model_at_end`` with ``metric_for_best_model="loss"`` and ``EarlyStoppingCallback(patience,
threshold=0.0)``, camlab-ethz/poseidon scOT/train.py @ v1-paper): an evaluation improves only when it is strictly
lower than every earlier one, the first of equal values is kept, and the run stops once ``patience`` evaluations in a
row did not improve. The history lives in the run's ``log.jsonl`` (records of kind ``validation``), so that a resumed
run (whose log is cut back to its checkpoint) decides as an uninterrupted one; every evaluated step is a checkpoint,
and the best one is never pruned (:meth:`Selection.protected`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

KIND = "validation"  # log.jsonl records of the validation error
METRIC = "l2_full/mean"  # the error selected on: mean over validation sets of the relative L2 over the rollout


@dataclass
class Selection:
    patience: int | None = None  # evaluations in a row without improvement before stopping (None: never stop)
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, validation error), in step order

    @classmethod
    def resumed(cls, log_path: Path, patience: int | None) -> "Selection":
        """The history of a run's log (already cut back to the checkpoint a resume starts from)."""
        from .logger import read_log

        found = read_log(log_path, kind=KIND) if log_path.is_file() else []
        history = [(int(r["step"]), float("nan") if r.get(METRIC) is None else float(r[METRIC])) for r in found
                   if isinstance(r.get("step"), int)]
        return cls(patience, sorted(dict(history).items()))

    def has(self, step: int) -> bool:
        return any(s == step for s, _ in self.history)

    def add(self, step: int, error: float) -> bool:
        """Record the validation ``error`` at ``step``; True when it is the best so far."""
        self.history = [(s, e) for s, e in self.history if s != step] + [(step, error)]
        self.history.sort()
        return self.best_step == step

    @property
    def best_step(self) -> int | None:
        best, chosen = math.inf, None
        for step, error in self.history:  # strictly lower only: the first of equal values is kept
            if math.isfinite(error) and error < best:
                best, chosen = error, step
        return chosen if chosen is not None else (self.history[0][0] if self.history else None)

    @property
    def best_error(self) -> float | None:
        return dict(self.history).get(self.best_step) if self.history else None

    def since_best(self) -> int:
        """Evaluations after the best one."""
        best = self.best_step
        return sum(1 for s, _ in self.history if best is not None and s > best)

    def should_stop(self) -> bool:
        return self.patience is not None and self.since_best() >= self.patience

    def protected(self) -> set[int]:
        """The checkpoint steps pruning must keep: the best one."""
        return set() if self.best_step is None else {self.best_step}

    def summary(self, steps_done: int, steps: int) -> dict:
        """What the run records of its selection (``finished.json``, the model's ``pretrained_cfg["selection"]``)."""
        return {"rule": "lowest validation error (relative L2 over the rollout, mean over validation sets), "
                        "evaluated at step 0 and every training.eval_every steps",
                "step": self.best_step, "validation_l2": self.best_error, "steps_done": steps_done, "steps": steps,
                "early_stopped": steps_done < steps, "patience": self.patience,
                "history": [[s, e] for s, e in self.history]}

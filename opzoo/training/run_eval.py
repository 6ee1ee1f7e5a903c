"""A run's evaluations: every test set rolled out over its horizon, with the persistence baseline, written to
``eval/step-N.{json,csv}`` with PNG plots, logged, and the loss plot of the finished run."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..evaluation.rollouts import DatasetResult, evaluate_dataset, persistence_result, read_results, write_results
from .build import RunData
from .config import RunConfig
from .logger import RunLogger


class RunEvaluation:
    """Evaluates a run's model on its test sets. ``label`` names the model in plots; ``from_scratch`` says
    whether step 0 is a random init (else the zero-shot pretrained model)."""

    def __init__(self, cfg: RunConfig, data: RunData, run_dir: Path, device: torch.device, autocast: bool,
                 label: str, from_scratch: bool):
        self.cfg, self.data, self.run_dir, self.device, self.autocast = cfg, data, run_dir, device, autocast
        self.label, self.from_scratch = label, from_scratch
        self.baselines: dict[str, DatasetResult] = {}
        self.zero_shot: list[DatasetResult] | None = None
        self.last: list[DatasetResult] | None = None

    def persistence(self, name: str, source) -> DatasetResult:
        """The persistence baseline on test set ``name`` (computed once per run: it has no weights), at the file's
        own grid as every command computes it (:func:`opzoo.evaluation.rollouts.persistence_result`)."""
        if name not in self.baselines:
            self.baselines[name] = persistence_result(name, source, self.data.frame_shape, self.cfg.data.horizon,
                                                      device=self.device,
                                                      max_trajectories=self.cfg.data.max_test_trajectories)
        return self.baselines[name]

    def evaluate(self, model: nn.Module, step: int, write: bool = True, plots: bool | None = None) -> list[DatasetResult]:
        """Roll ``model`` out on every test set; writes ``eval/step-N.{json,csv}`` and (``plots``) the PNGs."""
        results, firsts = [], {}
        for name, source in self.data.test:
            r, first = evaluate_dataset(model, name, source, self.data.frame_shape, self.cfg.data.horizon,
                                        device=self.device, max_trajectories=self.cfg.data.max_test_trajectories,
                                        autocast=self.autocast, keep_first=True)
            r.persistence = self.persistence(name, source)
            results.append(r)
            firsts[name] = first
        if write:
            write_results(results, self.run_dir / "eval", stem=f"step-{step:08d}")
            if self.cfg.evaluation.plots if plots is None else plots:
                self.plot(step, results, firsts)
        if step == 0:
            self.zero_shot = results
        return results

    def validation_error(self, model: nn.Module) -> tuple[float, dict[str, float]]:
        """``model``'s error on the validation splits: the mean over them of the relative L2 over the rollout (the
        error :mod:`opzoo.training.selection` selects on), and each split's."""
        each = {}
        for name, source in self.data.validation:
            r = evaluate_dataset(model, name, source, self.data.frame_shape, self.cfg.data.horizon, device=self.device,
                                 max_trajectories=self.cfg.data.max_test_trajectories, autocast=self.autocast)
            each[name] = r.l2_full
        return sum(each.values()) / len(each), each

    def plot(self, step: int, results: list[DatasetResult], firsts: dict) -> None:
        from ..evaluation.plots import plot_error_curves, plot_expert_load, plot_rollout_panels, rollout_title

        out, stem = self.run_dir / "eval", f"step-{step:08d}"
        zero = {r.name: r.per_step for r in self.zero_shot} if self.zero_shot and step > 0 else {}
        plot_error_curves({r.name: r.per_step for r in results}, out / f"{stem}-error-vs-step.png",
                          title=f"{self.label}: rollout error per step (after {step} steps)",
                          persistence={r.name: r.persistence.per_step for r in results if r.persistence},
                          reference=zero, reference_label="step 0" if self.from_scratch else "zero-shot")
        if any(r.expert_load for r in results):
            plot_expert_load({r.name: r.expert_load for r in results}, out / f"{stem}-expert-load.png",
                             title=f"expert load per dataset (after {step} steps)")
        channel = self.cfg.evaluation.plot_channel
        for name, source in self.data.test:
            truth, pred = firsts[name]
            plot_rollout_panels(truth, pred, self.cfg.evaluation.plot_steps, out / f"{stem}-{name}.png", channel=channel,
                                title=rollout_title(f"{self.label} after {step} steps", source, 0, channel))

    def log(self, step: int, results: list[DatasetResult], logger: RunLogger) -> None:
        self.last = results
        logger.log({"kind": "eval", "step": step, **{f"l2_full/{r.name}": r.l2_full for r in results},
                    "l2_full/mean": sum(r.l2_full for r in results) / len(results)}, flush=True)

    def recall_step_zero(self) -> list[DatasetResult] | None:
        """A resumed run's step-0 (zero-shot) scores, from the eval file the first session wrote, so that the
        summary and the card still compare against them."""
        path = self.run_dir / "eval" / "step-00000000.json"
        if path.is_file():
            self.zero_shot = read_results(path)
        return self.zero_shot

    def plot_losses(self) -> None:
        """``loss.png``: the training loss and each test set's error over the run (from ``log.jsonl``)."""
        from ..evaluation.plots import plot_loss
        from .logger import read_log

        records = read_log(self.run_dir / "log.jsonl", kind=None)
        train = [r for r in records if r.get("kind") == "train"]
        evals = [r for r in records if r.get("kind") == "eval"]
        series = {name: ([r["step"] for r in evals], [r[f"l2_full/{name}"] for r in evals])
                  for name in self.data.train.names}
        if train:
            plot_loss([r["step"] for r in train], [r["loss"] for r in train], self.run_dir / "loss.png", series,
                      title=f"{self.label}: training loss and test error")

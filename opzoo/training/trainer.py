"""The Trainer: auto-regressive denoising training with checkpoints, resume, DDP, hooks and evaluation.

One iteration ``i`` (0-based; logged as ``step = i + 1``, the number of updates done):
global batch of step i (seeded by (seed, i)) -> rank shard -> ``x += ε‖x‖·randn`` -> forward under
autocast -> masked relative L2 + aux loss -> backward (DDP averages gradients) -> grad-norm clip ->
hooks -> lr = lr · schedule(i) · lr_scale · hook multipliers -> optimizer step -> EMA -> hooks.

The Trainer only trains; its parts live in their own modules: the batches (:mod:`.batches`), the run
directory (:mod:`.run_dir`), checkpointed state (:mod:`.run_state`), evaluation and plots (:mod:`.run_eval`),
export and card (:mod:`.export`), forensics (:mod:`.forensics`), router monitoring (:mod:`.expert_load`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..errors import ConfigError
from ..evaluation.l2 import relative_l2_loss
from ..evaluation.rollouts import DatasetResult
from . import run_dir as rundir
from .batches import RunBatches
from .build import build_run_model, prepare_run_data
from .config import RunConfig
from .distributed import all_reduce_mean, barrier, shutdown, start_process, unwrap, wrap_model
from .ema import EMA, ema_weights
from .expert_load import router_monitor
from .export import base_weights, export_model, run_model_card, run_results, unsharded_copy
from .forensics import DivergenceWatch, TrainingDivergedError, batch_has_bad_data, raise_bad_data, raise_diverged
from .generate import generate_missing
from .hooks import StepContext, build_hooks, combined_multipliers
from .logger import RunLogger, progress_line
from .memory_plan import StepPeak, plan_memory, run_batch_shape
from .noise import add_denoising_noise
from .optim import build_optimizer, build_param_groups, set_learning_rates
from .run_eval import RunEvaluation
from .run_state import RunState
from .schedule import schedule_factor
from .selection import KIND, METRIC, Selection
from .stop import RunStopped, StopSignals
from .tuning import adapted_tensors, apply_tuning, parse_tune


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    losses: list[float] = field(default_factory=list)  # this process's run only (not before a resume)
    evals: dict[int, list[DatasetResult]] = field(default_factory=dict)
    resumed_from: int | None = None
    model_dir: Path | None = None
    already_finished: bool = False  # the directory held this run, finished: nothing was done
    selection: dict | None = None  # training.selection: validation: which step's weights were kept, and why
    divergence: str | None = None  # set when a loss went over DIVERGENCE_FACTOR x the first loss


class Trainer:
    """Runs one training job from a validated :class:`RunConfig`.

    ``model`` may be given directly (e.g. for fine-tuning a loaded model); otherwise the run
    config's ``model`` section builds it.
    """

    def __init__(self, cfg: RunConfig, model: nn.Module | None = None, show_progress: bool | None = None):
        self.cfg, self.run_dir, self.show_progress, t = cfg, Path(cfg.output_dir), show_progress, cfg.training
        self.env, self.device = start_process(cfg.distributed, t.device, t.deterministic)
        if self.env.is_main:
            generate_missing(cfg.data.datasets, progress=show_progress is not False)
        barrier(self.env)
        torch.manual_seed(cfg.seed)
        self.model = model if model is not None else build_run_model(cfg.model)
        self.base_weights = base_weights(cfg, self.model)  # as loaded: a resume records the weights it started from
        log = logging.getLogger("opzoo")
        say = log.info if self.env.is_main else lambda line: None
        built = self.model
        fitted, self.data = prepare_run_data(cfg, self.model, say)
        self.model = fitted.model
        self.fsdp = self.env.enabled and cfg.distributed.strategy == "fsdp"
        if self.fsdp and t.ema:
            raise ConfigError("training.ema is not supported with distributed.strategy: fsdp")
        spec, adapted = parse_tune(t.tune), adapted_tensors(built, self.model)
        if self.fsdp and spec.mode != "full":
            raise ConfigError(f"training.tune {spec} is not supported with distributed.strategy: fsdp (its frozen and "
                              f"trained parameters would share flat shards); use distributed.strategy: ddp")
        # planned before anything is frozen or wrapped: on a meta copy of the fitted model, the run's options
        self.memory_plan = plan_memory(self.model, cfg, run_batch_shape(cfg, fitted, self.env.world_size), adapted,
                                       self.device, self.env.world_size)
        del built, fitted
        self.hooks = build_hooks(cfg.optimizer.hooks)
        for hook in self.hooks:
            hook.on_model_built(self.model)
        self.tuning = apply_tuning(self.model, spec, adapted)
        say(self.tuning.line())
        say(self.memory_plan.line())
        if self.memory_plan.grad_checkpointing:
            self.model.set_grad_checkpointing(True)
        self.model.to(self.device)
        self.peak = StepPeak(self.device, measure=not (self.env.enabled and self.device.type == "cpu"))
        # wrapped before the optimizer is built: FSDP replaces parameters by sharded ones
        self.wrapped = wrap_model(self.model, self.env, cfg.distributed.strategy, self.device,
                                  cfg.distributed.find_unused_parameters)
        self.optimizer = build_optimizer(build_param_groups(self.model, cfg.optimizer, self.hooks), cfg.optimizer)
        self.ema = EMA(self.model, t.ema) if t.ema else None
        self.autocast = (self.device.type == "cuda" and t.amp != "off") or t.amp == "bf16"
        self.batches = RunBatches(self.data.train, t.batch_size, cfg.seed, self.env, self.device, t.num_workers)
        self.state = RunState(self.run_dir / "checkpoints", cfg.to_dict(), self.env, self.model, self.wrapped,
                              self.optimizer, self.ema, self.hooks, cfg.distributed.strategy, cfg.checkpoint.keep_last)
        self.evaluation = RunEvaluation(cfg, self.data, self.run_dir, self.device, self.autocast, self.model_label(),
                                        self.from_scratch)
        # called every step after the config's hooks (not checkpointed: they keep no state worth resuming)
        self.builtin_hooks = router_monitor(self.model, t.expert_load_threshold, t.expert_load_window, t.log_every)
        self.command: str | None = None  # the command line that started the run, for the model card
        self.selecting = t.selection == "validation"
        self.selection: Selection | None = None  # set by the loop
        self._steps_done = t.steps  # fewer when the run stops early on validation

    @property
    def from_scratch(self) -> bool:
        """Whether this run starts from random weights (no published or saved weights loaded)."""
        return not self.cfg.model.pretrained and not self.cfg.model.reference.saved

    def model_label(self) -> str:
        """The model as plots and the card name it: ``NAME (from scratch)`` or ``NAME (fine-tuned)``."""
        return f"{self.cfg.model.name} ({'from scratch' if self.from_scratch else 'fine-tuned'})"

    @property
    def step_hooks(self) -> list:
        return [*self.hooks, *self.builtin_hooks]

    def _forward(self, model: nn.Module, x: Tensor) -> Tensor:
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            return model(x)

    def loss_fn(self, pred: Tensor, batch: Mapping[str, Tensor], reduction: str = "mean") -> Tensor:
        return relative_l2_loss(pred, batch["y"], batch["mask"], reduction=reduction)

    def _say(self, message: str) -> None:
        if self.env.is_main:
            print(message, flush=True)

    # ---- evaluation and export ------------------------------------------------------------------
    def evaluate(self, step: int, write: bool = True, plots: bool | None = None) -> list[DatasetResult]:
        """Roll out every test set over its horizon (EMA weights when on); writes ``eval/step-N.*`` and plots."""
        with ema_weights(unwrap(self.wrapped), self.ema) as model:
            return self.evaluation.evaluate(model, step, write, plots)

    def _evaluate_and_log(self, step: int, result: TrainResult, logger: RunLogger) -> None:
        if self.fsdp:  # a sharded model runs forward on every rank; rank 0 writes
            evals = self.evaluate(step, write=self.env.is_main)
        if self.env.is_main:
            evals = evals if self.fsdp else self.evaluate(step)
            result.evals[step] = evals
            self.evaluation.log(step, evals, logger)
        barrier(self.env)

    def export(self, out: Path, model: nn.Module | None = None) -> Path:
        """Save the trained model (EMA weights when on) as an opzoo repo with its data facts and card."""
        final = self.evaluation.last or []
        selection = self.selection.summary(self._steps_done, self.cfg.training.steps) if self.selection else None
        card = run_model_card(self.cfg, self.data, self.from_scratch, self.evaluation.zero_shot, final, self.command,
                              self.base_weights, selection, self.tuning.line())
        return export_model(model or unwrap(self.wrapped), self.ema, self.cfg, self.data, out, card,
                            run_results(final), selection, self.tuning, out.parent / "adapter")

    def _export_finished(self, result: TrainResult) -> None:
        copy = unsharded_copy(self.wrapped, self.model, self.env) if self.fsdp else None  # collective
        if self.env.is_main:
            result.model_dir = self.export(self.run_dir / "model", copy)
            if self.cfg.evaluation.plots:  # off: no PNG at all (a picture costs about as much as a tiny run)
                self.evaluation.plot_losses()
        barrier(self.env)

    # ---- the run --------------------------------------------------------------------------------
    def fit(self, new: bool = False) -> TrainResult:
        """Run (or resume) the job in ``output_dir``. ``new``: move what the directory holds aside
        first (to ``<dir>.replaced-<time>``) and start fresh. See :mod:`opzoo.training.run_dir`."""
        t = self.cfg.training
        lock, finished = None, False
        try:
            plan, lock = rundir.take_run_dir(
                self.run_dir, self.cfg.to_dict(), rundir.flatten_config(RunConfig().to_dict()), is_main=self.env.is_main,
                new=new, allow_resume=self.cfg.checkpoint.resume, sync=lambda: barrier(self.env), say=self._say)
            if plan.action == "finished":
                done = rundir.finished_steps(self.run_dir, t.steps)
                early = f" (stopped early on validation at step {done})" if done < t.steps else ""
                self._say(f"{self.run_dir} holds this run, finished: {done} of {t.steps} steps done{early}, model in "
                          f"{self.run_dir / 'model'}. Nothing to do (pass --new to start it again from step 0)")
                finished = True
                return TrainResult(self.run_dir, t.steps, already_finished=True, model_dir=self.run_dir / "model")
            self.home = rundir.RunHome(self.run_dir)
            if self.env.is_main:
                sources = [p.source for p in self.data.train.datasets] + [te.source for _, te in self.data.test]
                rundir.record_or_check_data(self.run_dir, plan, sources)
                self.base_weights = rundir.record_or_check_base(self.run_dir, plan, self.base_weights, self._say)
            start = self._start(plan)
            result = TrainResult(self.run_dir, t.steps, resumed_from=start or None)
            if start and self.evaluation.recall_step_zero():
                result.evals.setdefault(0, self.evaluation.zero_shot)
            logger = RunLogger(self.run_dir, enabled=self.env.is_main, resume_step=start if start else None,
                               home=self.home)
            try:
                with StopSignals(t.stop_deadline, self.state.last_checkpoint) as stop:
                    self._loop(start, result, logger, stop)
            finally:
                logger.close()
            self.home.check("marking the run finished")
            if self.env.is_main:
                rundir.mark_finished(self.run_dir, t.steps, result.model_dir,
                                     {**({"divergence": result.divergence} if result.divergence else {}),
                                      **({"steps_done": result.steps, "selection": result.selection}
                                         if result.selection else {})})
            finished = True
            return result
        finally:
            if lock is not None:
                lock.release()
            shutdown(self.env, finished)

    def _start(self, plan: rundir.RunPlan) -> int:
        """The first step to run: 0, or the resumed checkpoint's (its state restored)."""
        if plan.action == "resume":
            start = self.state.restore(plan.checkpoint, plan.files)
            self._say(f"resuming from step {start} of {self.cfg.training.steps} (checkpoint {plan.checkpoint})")
            if plan.harmless:
                self._say(f"  changed since the start (harmless): {rundir.format_changes(plan.harmless)}")
            return start
        if plan.restart:
            self._say(f"{self.run_dir} holds this run without a checkpoint yet: starting again from step 0")
        return 0

    def _loop(self, start: int, result: TrainResult, logger: RunLogger, stop: StopSignals) -> None:
        t, ckpt_every = self.cfg.training, self.cfg.checkpoint.every
        watch = DivergenceWatch.resumed(self.run_dir / "log.jsonl", start)
        selection = self.selection = Selection.resumed(self.run_dir / "log.jsonl", t.early_stopping) \
            if self.selecting else None
        if t.eval_every and start == 0:
            self._evaluate_and_log(0, result, logger)
        if selection is not None and start % t.eval_every == 0 and not selection.has(start):
            if start == 0:  # the starting weights may be the best: a checkpoint to return to
                self._save(0)
            self._validate(start, logger)  # a resume that stopped between its checkpoint and its evaluation
        bar = tqdm(total=t.steps, initial=start, desc="train", unit="step", dynamic_ncols=True,
                   disable=None if (self.env.is_main and self.show_progress is not False) else True)
        t0, step, last_saved = time.perf_counter(), start, start
        batches = self.batches.from_step(start, t.steps) if not (selection and selection.should_stop()) else []
        for i, batch in enumerate(batches, start):
            if stop.requested(self.env, self.device):
                self._stop(i, last_saved, stop, logger)
            step = i + 1
            with self.peak.measuring(step - start, self._held(batch)):
                record = self._step(i, batch, logger)
            if self.peak.done_after(step - start) and self.env.is_main:
                self.peak.write(self.run_dir, self.memory_plan, logger, step)
            result.losses.append(record["loss"])
            if (message := watch.update(step, record["loss"])) is not None:
                result.divergence = message
                logger.log({"kind": "warning", "step": step, "divergence": True, "message": message}, flush=True)
            record["time"] = round(time.perf_counter() - t0, 4)
            logger.log(record, flush=step % t.log_every == 0)
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.4g}", lr=f"{record['lr']:.2e}", refresh=False)
            if step % t.log_every == 0 and bar.disable and self.env.is_main and self.show_progress is not False:
                print(progress_line(step, t.steps, start, record["loss"], record["lr"], time.perf_counter() - t0),
                      flush=True)
            evaluating = t.eval_every and step % t.eval_every == 0 and step < t.steps
            if (ckpt_every and step % ckpt_every == 0 and step < t.steps) or (evaluating and selection is not None):
                self._save(step)
                last_saved = step
            if evaluating and selection is not None:  # the test split waits for the model the run keeps
                self._validate(step, logger)
                if selection.should_stop():
                    break
            elif evaluating:
                self.home.check(f"evaluating step {step}")
                self._evaluate_and_log(step, result, logger)
        bar.close()
        if self.env.is_main:  # a run of fewer steps than the peak's: what it measured
            self.peak.write(self.run_dir, self.memory_plan, logger, step)
        done = step
        if done > last_saved:
            self._save(done)
        if selection is not None:
            if not selection.has(done):
                self._validate(done, logger)
            self._keep_best(selection, done)
            result.selection = selection.summary(done, t.steps)
        result.steps = self._steps_done = done
        self.home.check(f"evaluating step {done}")
        self._evaluate_and_log(done, result, logger)
        self.home.check("exporting the model")
        self._export_finished(result)

    def _held(self, batch: Mapping[str, Tensor]) -> list[Tensor]:
        """What a step starts with: the weights, buffers, optimizer state, EMA copy and the batch."""
        state = [v for s in self.optimizer.state.values() for v in s.values() if isinstance(v, Tensor)]
        shadow = list(self.ema.shadow.values()) if self.ema is not None else []
        return [*self.model.parameters(), *self.model.buffers(), *state, *shadow,
                *(v for v in batch.values() if isinstance(v, Tensor))]

    def _validate(self, step: int, logger: RunLogger) -> None:
        """The validation error at ``step`` (EMA weights when on; every rank computes it, so that all decide alike),
        logged and added to the selection."""
        self.home.check(f"validating step {step}")
        with ema_weights(unwrap(self.wrapped), self.ema) as model:
            error, each = self.evaluation.validation_error(model)
        best = self.selection.add(step, error)
        logger.log({"kind": KIND, "step": step, METRIC: error, **{f"l2_full/{k}": v for k, v in each.items()},
                    "best": best}, flush=True)

    def _keep_best(self, selection: Selection, done: int) -> None:
        """Bring the best checkpoint's weights (and EMA) back, when it is not the last step's."""
        best = selection.best_step
        if best is None or best == done:
            return
        from .checkpoint import checkpoint_name, read_checkpoint

        path = self.run_dir / "checkpoints" / checkpoint_name(best)
        self.state.restore(path, read_checkpoint(path))
        self._say(f"selected on validation: step {best} (validation l2 {selection.best_error:.4g}) of {done} done")

    def _save(self, step: int) -> None:
        self.home.check(f"writing the checkpoint of step {step}")
        self.state.save(step, self.selection.protected() if self.selection is not None else frozenset())

    def _step(self, i: int, batch: Mapping[str, Tensor], logger: RunLogger) -> dict:
        """One update on ``batch`` (iteration ``i``); returns its log record (``loss``, ``lr``, ...)."""
        cfg, model, step = self.cfg, self.wrapped, i + 1
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        x = add_denoising_noise(batch["x"], cfg.training.noise_scale, z=self.batches.noise(i, batch["x"]))
        per_sample = self.loss_fn(self._forward(model, x), batch, reduction="none")
        aux = unwrap(model).aux_loss() if hasattr(unwrap(model), "aux_loss") else 0.0
        loss = per_sample.mean() + aux
        loss.backward()
        loss_value = float(all_reduce_mean(loss.detach().float(), self.env))
        record = {"kind": "train", "step": step, "loss": loss_value}
        if not math.isfinite(loss_value):
            if batch_has_bad_data(batch, self.env):  # NaN/Inf in the data reach the loss: name the file
                raise_bad_data(self.data.train, self.batches.global_indices(i), step, logger)
            self._diverged("loss", loss_value, step, per_sample, batch, logger)
        if cfg.optimizer.grad_clip is not None:
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            record["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.optimizer.grad_clip))
            if not math.isfinite(record["grad_norm"]):
                self._diverged("gradient norm", record["grad_norm"], step, per_sample, batch, logger)
        record["lr"] = base_lr = cfg.optimizer.lr * schedule_factor(cfg.schedule, i, cfg.training.steps)
        extra: dict = {}
        ctx = StepContext(step=i, model=unwrap(model), optimizer=self.optimizer, batch=batch, loss=loss_value,
                          base_lr=base_lr, fresh_batch=lambda index=0: self.batches.fresh(i, index),
                          loss_fn=self.loss_fn, forward=lambda x: self._forward(unwrap(model), x),
                          all_reduce_mean=lambda v: all_reduce_mean(v, self.env), world_size=self.env.world_size,
                          rank=self.env.rank, run_dir=self.run_dir, record=extra,
                          log=lambda r: logger.log(r, flush=True))
        hooks = self.step_hooks
        for hook in hooks:
            hook.before_optimizer_step(ctx)
        set_learning_rates(self.optimizer, base_lr, combined_multipliers(hooks, ctx, len(self.optimizer.param_groups)))
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(unwrap(model))
        for hook in hooks:
            hook.after_optimizer_step(ctx)
        return {**record, **extra}

    def _diverged(self, what: str, value: float, step: int, per_sample: Tensor, batch: Mapping[str, Tensor],
                  logger: RunLogger) -> None:
        raise_diverged(what, value, step, per_sample.detach(), batch["dataset"], self.data.train.names, self.env,
                       self.state.last_checkpoint(), logger)

    def _stop(self, done: int, last_saved: int, stop: StopSignals, logger: RunLogger) -> None:
        """After ``done`` steps: checkpoint (unless just written), log, raise RunStopped."""
        if done > last_saved:
            self._save(done)
        msg = (f"{stop.name or 'signal'}: stopped at step {done}; last checkpoint {self.state.last_checkpoint()}; "
               "re-run the same command to resume")
        logger.log({"kind": "stopped", "step": done, "message": msg}, flush=True)
        stop.stopped()
        raise RunStopped(msg, stop.signum or 15)


__all__ = ["Trainer", "TrainResult", "TrainingDivergedError", "progress_line"]

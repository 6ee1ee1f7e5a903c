"""The Trainer: auto-regressive denoising training with checkpoints, resume, DDP, hooks and evaluation.

One iteration ``i`` (0-based; logged as ``step = i + 1``, the number of updates done):
global batch of step i (seeded by (seed, i)) -> rank shard -> ``x += ε‖x‖·randn`` -> forward under
autocast -> masked relative L2 + aux loss -> backward (DDP averages gradients) -> grad-norm clip ->
hooks -> lr = lr · schedule(i) · lr_scale · hook multipliers -> optimizer step -> EMA -> hooks.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..data import StepBatchSampler, collate, step_generator
from ..data.errors import NonFiniteDataError
from ..errors import ConfigError, OpzooError
from ..routing import aux_losses, named_routers
from . import checkpoint as ckpt
from . import run_dir as rundir
from .bad_data import bad_windows_message, check_test_sets, non_finite_in
from .build import RunData, build_data, build_model, open_datasets
from .config import RunConfig
from .distributed import (
    DistEnv,
    all_reduce_max,
    all_reduce_mean,
    barrier,
    full_state_dict,
    init_distributed,
    shutdown,
    unwrap,
    wrap_model,
)
from .ema import EMA, ema_weights
from .evaluate import DatasetResult, Persistence, evaluate_dataset, write_results
from .expert_load import ExpertLoadMonitor, step_counts
from .finetune import adapt_to_data
from .hooks import StepContext, build_hooks, combined_multipliers, split_hook_state
from .logger import RunLogger
from .losses import relative_l2_loss
from .noise import add_denoising_noise
from .optim import build_optimizer, build_param_groups, set_learning_rates
from .schedule import schedule_factor
from .stop import RunStopped, StopSignals

NOISE_SALT, FRESH_SALT = 1, 2
FRESH_INDEX_SALT = 1000  # fresh batch k >= 1 of a step uses salt 1000 + k
#: A finite loss above this multiple of the run's first loss is flagged as divergence (log and summary).
DIVERGENCE_FACTOR = 100.0


def progress_line(step: int, total: int, start: int, loss: float, lr: float, elapsed: float) -> str:
    """The line printed every ``training.log_every`` steps when stdout is not a terminal (no bar)."""
    rate = (step - start) / elapsed if elapsed > 0 else float("nan")
    eta = (total - step) / rate if rate > 0 else float("nan")
    return (f"step {step}/{total}  loss {loss:.4g}  lr {lr:.3g}  {rate:.2f} steps/s  "
            f"ETA {_duration(eta)}")


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class TrainingDivergedError(OpzooError):
    """A non-finite loss or gradient; the run stops and the last good checkpoint is kept."""


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    losses: list[float] = field(default_factory=list)  # this process's run only (not before a resume)
    evals: dict[int, list[DatasetResult]] = field(default_factory=dict)
    resumed_from: int | None = None
    model_dir: Path | None = None
    already_finished: bool = False  # the directory held this run, finished: nothing was done
    divergence: str | None = None  # set when a loss went over DIVERGENCE_FACTOR x the first loss


def pick_device(name: str, env: DistEnv) -> torch.device:
    if name == "auto":
        return torch.device(f"cuda:{env.local_rank}" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Trainer:
    """Runs one training job from a validated :class:`RunConfig`.

    ``model`` may be given directly (e.g. for fine-tuning a loaded model); otherwise the run
    config's ``model`` section builds it.
    """

    def __init__(self, cfg: RunConfig, model: nn.Module | None = None, show_progress: bool | None = None):
        self.cfg = cfg
        self.run_dir = Path(cfg.output_dir)
        self.env = init_distributed(cfg.distributed.backend, pick_device(cfg.training.device, DistEnv()),
                                    timeout_s=cfg.distributed.timeout_s)
        self.device = pick_device(cfg.training.device, self.env)
        t = cfg.training
        if t.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
            if self.device.type == "cuda":
                torch.backends.cudnn.benchmark = False
        self.show_progress = show_progress
        self._generate_missing()
        torch.manual_seed(cfg.seed)
        self.model = model if model is not None else build_model(cfg.model)
        opened = open_datasets(cfg)
        if cfg.model.adapt:
            self.model = adapt_to_data(self.model, cfg, opened)
        self.data: RunData = build_data(cfg, self.model, opened)
        check_test_sets(self.data.test, self.data.test_frames, cfg.data.max_test_trajectories)
        self.hooks = build_hooks(cfg.optimizer.hooks)
        for hook in self.hooks:
            hook.on_model_built(self.model)
        self.model.to(self.device)
        self.fsdp = self.env.enabled and cfg.distributed.strategy == "fsdp"
        if self.fsdp and t.ema:
            raise ConfigError("training.ema is not supported with distributed.strategy: fsdp")
        # wrapped before the optimizer is built: FSDP replaces parameters by sharded ones
        self.wrapped = wrap_model(self.model, self.env, cfg.distributed.strategy, self.device,
                                  cfg.distributed.find_unused_parameters)
        self.groups = build_param_groups(self.model, cfg.optimizer, self.hooks)
        self.optimizer = build_optimizer(self.groups, cfg.optimizer)
        self.ema = EMA(self.model, t.ema) if t.ema else None
        self.autocast = (self.device.type == "cuda" and t.amp != "off") or t.amp == "bf16"
        self.ckpt_dir = self.run_dir / "checkpoints"
        self._baselines: dict[str, DatasetResult] = {}
        self._zero_shot: list[DatasetResult] | None = None
        self._last_eval: list[DatasetResult] | None = None
        self.command: str | None = None  # the command line that started the run, for the model card

    @property
    def from_scratch(self) -> bool:
        """Whether this run starts from random weights (no published or saved weights loaded)."""
        m = self.cfg.model
        from ..reference import parse_model_reference

        return not m.pretrained and not parse_model_reference(m.name).saved

    def model_label(self) -> str:
        """The model as plots and the card name it: ``NAME (from scratch)`` or ``NAME (fine-tuned)``."""
        return f"{self.cfg.model.name} ({'from scratch' if self.from_scratch else 'fine-tuned'})"

    def _persistence(self, name: str, source) -> DatasetResult:
        """The persistence baseline on test set ``name`` (computed once per run: it has no weights)."""
        if name not in self._baselines:
            self._baselines[name] = evaluate_dataset(Persistence(), name, source, self.data.frame_shape, self.cfg.data.horizon,
                                                     device=self.device,
                                                     max_trajectories=self.cfg.data.max_test_trajectories)
        return self._baselines[name]

    def _generate_missing(self) -> None:
        from .generate import generate_dataset

        for d in self.cfg.data.datasets:
            if d.generate is not None and not Path(d.path).is_file() and self.env.is_main:
                generate_dataset(d.generate, d.path, progress=self.show_progress is not False)
        barrier(self.env)

    # ---- batches --------------------------------------------------------------------------------
    def _sampler(self, start: int, stop: int, salt: int = 0) -> StepBatchSampler:
        return StepBatchSampler(self.data.train.window_probabilities(), self.cfg.training.batch_size, self.cfg.seed,
                                start, stop, self.env.rank, self.env.world_size, salt)

    def _batches(self, start: int) -> Iterator[dict[str, Tensor]]:
        sampler = self._sampler(start, self.cfg.training.steps)
        workers = self.cfg.training.num_workers
        loader = torch.utils.data.DataLoader(self.data.train, batch_sampler=sampler, collate_fn=collate,
                                             num_workers=workers, persistent_workers=False,
                                             pin_memory=self.device.type == "cuda")
        for batch in loader:
            yield {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def _fresh_batch(self, step: int, index: int = 0) -> dict[str, Tensor]:
        """Fresh batch ``index`` of ``step`` (a function of (seed, step, index), never a training batch)."""
        if index < 0:
            raise ValueError(f"fresh_batch: index must be >= 0, got {index}")
        salt = FRESH_SALT if index == 0 else FRESH_INDEX_SALT + index
        idx = next(iter(self._sampler(step, step + 1, salt)))
        batch = collate([self.data.train[i] for i in idx])
        return {k: v.to(self.device) for k, v in batch.items()}

    def _noise_draw(self, step: int, x: Tensor) -> Tensor:
        """This rank's rows of one global-batch draw (so noise does not depend on the rank count)."""
        per = x.shape[0]
        shape = (per * self.env.world_size, *x.shape[1:])
        z = torch.randn(shape, generator=step_generator(self.cfg.seed, step, NOISE_SALT))
        return z[self.env.rank * per:(self.env.rank + 1) * per]

    # ---- loss -----------------------------------------------------------------------------------
    def _forward(self, model: nn.Module, x: Tensor) -> Tensor:
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            return model(x)

    def loss_fn(self, pred: Tensor, batch: Mapping[str, Tensor], reduction: str = "mean") -> Tensor:
        return relative_l2_loss(pred, batch["y"], batch["mask"], reduction=reduction)

    # ---- checkpoints ----------------------------------------------------------------------------
    def _save(self, step: int) -> Path | None:
        opt_state = ckpt.optimizer_to_flat(self.optimizer)
        weights = full_state_dict(self.wrapped, self.env, self.cfg.distributed.strategy)
        path = None
        if self.env.is_main:
            extra: dict[str, Tensor] = {}
            hook_plain = []
            if self.ema is not None:
                extra.update({f"ema/{k}": v.detach().cpu() for k, v in self.ema.state_dict().items()})
            for i, hook in enumerate(self.hooks):
                tensors, plain = split_hook_state(hook.state_dict(), f"hook{i}/")
                extra.update(tensors)
                hook_plain.append(plain)
            state = {"hooks": hook_plain, "world_size": self.env.world_size,
                     "config": rundir.with_resolved_paths(self.cfg.to_dict())}
            path = ckpt.write_checkpoint(self.ckpt_dir, step, model_state=weights, optimizer_state=opt_state,
                                         state=state, extra=extra, keep_last=self.cfg.checkpoint.keep_last)
        barrier(self.env)
        return path

    def _restore(self, path: Path, files: Mapping) -> int:
        """Load a verified checkpoint (``ckpt.read_checkpoint``'s files) into the model, optimizer, EMA,
        hooks and RNGs; returns its step."""
        from ..hub import load_state_dict_strict

        weights = files["model.safetensors"]
        if self.fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(self.model, weights, options=StateDictOptions(full_state_dict=True))
        else:
            load_state_dict_strict(self.model, weights, str(path / "model.safetensors"))
        state = files["state.json"]
        ckpt.optimizer_from_flat(self.optimizer, files["optimizer.safetensors"], state["param_groups"], str(path))
        extra = files["extra.safetensors"]
        if self.ema is not None:
            self.ema.load_state_dict({k[4:]: v for k, v in extra.items() if k.startswith("ema/")})
        for i, hook in enumerate(self.hooks):
            prefix = f"hook{i}/"
            tensors = {k[len(prefix):]: v for k, v in extra.items() if k.startswith(prefix)}
            hook.load_state_dict({**state["hooks"][i], **tensors})
        ckpt.set_rng_state(extra, state["rng"])
        return int(state["step"])

    def _say(self, message: str) -> None:
        if self.env.is_main:
            print(message, flush=True)

    def _take_run_dir(self, new: bool) -> tuple[rundir.RunPlan, rundir.RunDirLock | None]:
        """Lock the run directory (rank 0), move old contents aside for ``new``, and decide: fresh,
        resume (verified checkpoint) or finished. Refusals raise RunDirError naming what differs."""
        lock = rundir.RunDirLock(self.run_dir) if self.env.is_main else None
        moved = None
        if lock is not None:
            lock.acquire()
        try:
            if lock is not None and new:
                moved = rundir.move_aside(self.run_dir)
            barrier(self.env)
            current = self.cfg.to_dict()
            defaults = rundir.flatten(RunConfig().to_dict())
            plan = rundir.plan_run(self.run_dir, current, defaults, allow_resume=self.cfg.checkpoint.resume or new)
            if plan.action == "finished":
                return plan, lock
            if lock is not None:
                # only now: a refused or finished run leaves the directory as it was, .lock included
                # (meanwhile a contender is told the recorded PID has ended, see describe_holder)
                lock.record_holder()
                if moved is not None:
                    self._say(f"moved the previous contents of {self.run_dir} to {moved}")
                for left in ckpt.clean_temporaries(self.ckpt_dir):
                    warnings.warn(f"{left}: a temporary directory of another process (PID@host in its name); "
                                  "left in place", stacklevel=2)
                rundir.clear_finished(self.run_dir)
                if plan.action == "fresh":
                    rundir.write_started_config(self.run_dir, current)
            barrier(self.env)
            return plan, lock
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    # ---- evaluation -----------------------------------------------------------------------------
    def evaluate(self, step: int, write: bool = True, plots: bool | None = None) -> list[DatasetResult]:
        """Roll out every test set over its horizon (rank 0); writes ``eval/step-N.{json,csv}`` and plots."""
        results, firsts = [], {}
        with ema_weights(unwrap(self.wrapped), self.ema) as model:
            for name, source in self.data.test:
                r, first = evaluate_dataset(model, name, source, self.data.frame_shape, self.cfg.data.horizon,
                                            device=self.device, max_trajectories=self.cfg.data.max_test_trajectories,
                                            autocast=self.autocast, keep_first=True)
                r.persistence = self._persistence(name, source)
                results.append(r)
                firsts[name] = first
        if write:
            out = self.run_dir / "eval"
            write_results(results, out, stem=f"step-{step:08d}")
            plots = self.cfg.evaluation.plots if plots is None else plots
            if plots:
                from .plots import plot_error_curves, plot_rollout_panels, rollout_title

                label = self.model_label()
                zero = {r.name: r.per_step for r in self._zero_shot} if self._zero_shot and step > 0 else {}
                plot_error_curves({r.name: r.per_step for r in results}, out / f"step-{step:08d}-error-vs-step.png",
                                  title=f"{label}: rollout error per step (after {step} steps)",
                                  persistence={r.name: r.persistence.per_step for r in results if r.persistence},
                                  reference=zero, reference_label="step 0" if self.from_scratch else "zero-shot")
                if any(r.expert_load for r in results):
                    from .plots import plot_expert_load

                    plot_expert_load({r.name: r.expert_load for r in results}, out / f"step-{step:08d}-expert-load.png",
                                     title=f"expert load per dataset (after {step} steps)")
                channel = self.cfg.evaluation.plot_channel
                for name, source in self.data.test:
                    truth, pred = firsts[name]
                    plot_rollout_panels(truth, pred, self.cfg.evaluation.plot_steps, out / f"step-{step:08d}-{name}.png",
                                        channel=channel,
                                        title=rollout_title(f"{label} after {step} steps", source, 0, channel))
        if step == 0:
            self._zero_shot = results
        return results

    # ---- the loop -------------------------------------------------------------------------------
    def fit(self, new: bool = False) -> TrainResult:
        """Run (or resume) the job in ``output_dir``. ``new``: move what the directory holds aside
        first (to ``<dir>.replaced-<time>``) and start fresh. See :mod:`opzoo.training.run_dir`."""
        t = self.cfg.training
        lock = None
        try:
            plan, lock = self._take_run_dir(new)
            if plan.action == "finished":
                self._say(f"{self.run_dir} holds this run, finished: {t.steps} of {t.steps} steps done, model in "
                          f"{self.run_dir / 'model'}. Nothing to do (pass --new to start it again from step 0)")
                return TrainResult(self.run_dir, t.steps, already_finished=True, model_dir=self.run_dir / "model")
            self._check_data_fingerprints(plan)
            start = 0
            if plan.action == "resume":
                start = self._restore(plan.checkpoint, plan.files)
                self._say(f"resuming from step {start} of {t.steps} (checkpoint {plan.checkpoint})")
                if plan.harmless:
                    self._say(f"  changed since the start (harmless): {rundir.format_changes(plan.harmless)}")
            elif plan.restart:
                self._say(f"{self.run_dir} holds this run without a checkpoint yet: starting again from step 0")
            result = TrainResult(self.run_dir, t.steps, resumed_from=start or None)
            if start:
                self._recall_step_zero(result)
            logger = RunLogger(self.run_dir, enabled=self.env.is_main, resume_step=start if start else None)
            try:
                with StopSignals() as stop:
                    self._loop(start, result, logger, stop)
            finally:
                logger.close()
            if self.env.is_main:
                rundir.mark_finished(self.run_dir, t.steps, result.model_dir,
                                     {"divergence": result.divergence} if result.divergence else {})
            return result
        finally:
            if lock is not None:
                lock.release()
            shutdown(self.env)

    def _evaluate_and_log(self, step: int, result: TrainResult, logger: RunLogger) -> None:
        if self.fsdp:  # a sharded model runs forward on every rank; rank 0 writes
            evals = self.evaluate(step, write=self.env.is_main)
        if self.env.is_main:
            evals = evals if self.fsdp else self.evaluate(step)
            result.evals[step] = evals
            self._last_eval = evals
            logger.log({"kind": "eval", "step": step, **{f"l2_full/{r.name}": r.l2_full for r in evals},
                        "l2_full/mean": sum(r.l2_full for r in evals) / len(evals)}, flush=True)
        barrier(self.env)

    def _loop(self, start: int, result: TrainResult, logger: RunLogger, stop: StopSignals) -> None:
        cfg, t = self.cfg, self.cfg.training
        initial = self._initial_loss(start)
        names = self.data.train.names
        eval_every, ckpt_every = t.eval_every, cfg.checkpoint.every
        if eval_every and start == 0:
            self._evaluate_and_log(0, result, logger)
        model, params = self.wrapped, [p for g in self.optimizer.param_groups for p in g["params"]]
        bar = tqdm(total=t.steps, initial=start, desc="train", unit="step", dynamic_ncols=True,
                   disable=None if (self.env.is_main and self.show_progress is not False) else True)
        t0 = time.perf_counter()
        step = start
        has_routers = any(True for _ in named_routers(unwrap(model)))
        monitor = ExpertLoadMonitor(t.expert_load_threshold, t.expert_load_window) if has_routers else None
        last_saved = start
        for i, batch in enumerate(self._batches(start), start):
            if self._stop_requested(stop):
                self._stop(i, last_saved, stop, logger)
            step = i + 1
            model.train()
            self.optimizer.zero_grad(set_to_none=True)
            x = add_denoising_noise(batch["x"], t.noise_scale, z=self._noise_draw(i, batch["x"]).to(self.device))
            pred = self._forward(model, x)
            per_sample = self.loss_fn(pred, batch, reduction="none")
            aux = unwrap(model).aux_loss() if hasattr(unwrap(model), "aux_loss") else 0.0
            loss = per_sample.mean() + aux
            routed = self._routing_record(step, monitor, logger) if monitor is not None else {}
            loss.backward()
            loss_value = float(all_reduce_mean(loss.detach().float(), self.env))
            if not math.isfinite(loss_value):
                if self._batch_has_bad_data(batch):  # NaN/Inf in the data reach the loss: name the file
                    self._bad_data(i, logger)
                self._diverged(i, step, "loss", loss_value, per_sample.detach(), batch["dataset"], names, logger)
            grad_norm = None
            if cfg.optimizer.grad_clip is not None:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.optimizer.grad_clip))
                if not math.isfinite(grad_norm):
                    self._diverged(i, step, "gradient norm", grad_norm, per_sample.detach(), batch["dataset"], names, logger)
            base_lr = cfg.optimizer.lr * schedule_factor(cfg.schedule, i, t.steps)
            ctx = StepContext(step=i, model=unwrap(model), optimizer=self.optimizer, batch=batch, loss=loss_value,
                              base_lr=base_lr, fresh_batch=lambda index=0, i=i: self._fresh_batch(i, index),
                              loss_fn=self.loss_fn, forward=lambda x: self._forward(unwrap(model), x),
                              all_reduce_mean=lambda v: all_reduce_mean(v, self.env),
                              world_size=self.env.world_size, rank=self.env.rank, run_dir=self.run_dir)
            for hook in self.hooks:
                hook.before_optimizer_step(ctx)
            set_learning_rates(self.optimizer, base_lr, combined_multipliers(self.hooks, ctx, len(self.optimizer.param_groups)))
            self.optimizer.step()
            if self.ema is not None:
                self.ema.update(unwrap(model))
            for hook in self.hooks:
                hook.after_optimizer_step(ctx)
            result.losses.append(loss_value)
            if initial is None:
                initial = loss_value
            elif result.divergence is None and loss_value > DIVERGENCE_FACTOR * initial:
                result.divergence = (f"loss {loss_value:.4g} at step {step} is over {DIVERGENCE_FACTOR:g}x the first "
                                     f"loss {initial:.4g} (step 1): the run is diverging (lower optimizer.lr?)")
                logger.log({"kind": "warning", "step": step, "divergence": True, "message": result.divergence}, flush=True)
            record = {"kind": "train", "step": step, "loss": loss_value, "lr": base_lr,
                      "time": round(time.perf_counter() - t0, 4)}
            if grad_norm is not None:
                record["grad_norm"] = grad_norm
            record.update(routed.get("losses", {}))
            if step % t.log_every == 0 and "load" in routed:
                record["expert_load"] = routed["load"]
            logger.log(record, flush=step % t.log_every == 0)
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.4g}", lr=f"{base_lr:.2e}", refresh=False)
            if step % t.log_every == 0 and bar.disable and self.env.is_main and self.show_progress is not False:
                print(progress_line(step, t.steps, start, loss_value, base_lr, time.perf_counter() - t0), flush=True)
            if ckpt_every and step % ckpt_every == 0 and step < t.steps:
                self._save(step)
                last_saved = step
            if eval_every and step % eval_every == 0 and step < t.steps:
                self._evaluate_and_log(step, result, logger)
        bar.close()
        if step > start:
            self._save(t.steps)
        self._evaluate_and_log(t.steps, result, logger)
        if self.fsdp:
            exported = self.export_fsdp(self.run_dir / "model")
        if self.env.is_main:
            result.model_dir = exported if self.fsdp else self.export(self.run_dir / "model")
            self._plot_losses(result)
        barrier(self.env)

    def _routing_record(self, step: int, monitor: ExpertLoadMonitor, logger: RunLogger) -> dict:
        """This step's router losses (``aux_loss`` weighted total, ``aux/<group>`` unweighted, this rank's)
        and global expert loads (all ranks); feeds the collapse monitor and logs its warnings."""
        model = unwrap(self.wrapped)
        losses = {f"aux/{g}": float(v.detach()) for g, v in aux_losses(model).items()}
        if losses:
            losses["aux_loss"] = float(model.aux_loss().detach())
        counts = step_counts(model, reduce=lambda t: all_reduce_mean(t, self.env))
        for msg in monitor.update(step, counts):
            logger.log({"kind": "warning", "step": step, "message": msg}, flush=True)
        load = {n: [round(float(v), 6) for v in c / c.sum().clamp_min(1e-12)] for n, c in counts.items()}
        return {"losses": losses, "load": load}

    def _initial_loss(self, start: int) -> float | None:
        """The run's first training loss (from the log when resuming), the divergence reference."""
        if start == 0:
            return None
        from .logger import read_log

        path = self.run_dir / "log.jsonl"
        first = next((r.get("loss") for r in read_log(path)), None) if path.is_file() else None
        return first if isinstance(first, (int, float)) and math.isfinite(first) else None

    def _stop_requested(self, stop: StopSignals) -> bool:
        """Some rank got SIGTERM/SIGINT (agreed across ranks; no device work in a single process)."""
        if self.env.world_size == 1:
            return stop.signum is not None
        flag = torch.tensor([float(stop.signum is not None)], device=self.device)
        return bool(all_reduce_max(flag, self.env)[0] > 0)

    def _batch_has_bad_data(self, batch: Mapping[str, Tensor]) -> bool:
        """Some rank's batch holds NaN/Inf, or values whose squares overflow float32 (collective: every rank
        calls it after a non-finite loss)."""
        from .bad_data import OVERFLOW

        bad = ~(torch.isfinite(batch["x"]).all() & torch.isfinite(batch["y"]).all()) | \
            (batch["x"].abs().amax() >= OVERFLOW) | (batch["y"].abs().amax() >= OVERFLOW)
        return bool(all_reduce_max(bad.float().reshape(1), self.env)[0] > 0)

    def _stop(self, done: int, last_saved: int, stop: StopSignals, logger: RunLogger) -> None:
        """After ``done`` steps: checkpoint (unless just written), log, raise RunStopped."""
        if done > last_saved:
            self._save(done)
        kept = ckpt.list_checkpoints(self.ckpt_dir)
        last = kept[-1] if kept else "none"
        msg = f"{stop.name or 'signal'}: stopped at step {done}; last checkpoint {last}; re-run the same command to resume"
        logger.log({"kind": "stopped", "step": done, "message": msg}, flush=True)
        raise RunStopped(msg, stop.signum or 15)

    def _bad_data(self, i: int, logger: RunLogger) -> None:
        """The global batch of iteration ``i`` holds NaN/Inf: name the file, trajectory and count."""
        mixture = self.data.train
        found = []
        for index in dict.fromkeys(self._sampler(i, i + 1).global_indices(i).tolist()):
            k, j = mixture.locate(int(index))
            part = mixture.datasets[k]
            sample, t0 = part.window_position(j)
            window = part.source.read(sample, t0, t0 + part.t_in + part.t_out)
            if non_finite_in(np.asarray(window))[0]:
                found.append((part.source, sample))
        msg = bad_windows_message(found, i + 1) if found else \
            f"non-finite values in the training batch of step {i + 1} after resizing/padding the data"
        logger.log({"kind": "error", "step": i + 1, "message": msg}, flush=True)
        raise NonFiniteDataError(msg)

    def _diverged(self, i, step, what, value, per_sample, dataset, names, logger) -> None:
        bad = (~torch.isfinite(per_sample)).float()
        flags = torch.zeros(len(names), device=per_sample.device)
        flags.index_add_(0, dataset.to(per_sample.device), bad)
        flags = all_reduce_max(flags, self.env)
        present = torch.zeros(len(names), device=per_sample.device)
        present.index_add_(0, dataset.to(per_sample.device), torch.ones_like(bad))
        present = all_reduce_max(present, self.env)
        culprits = [n for n, f in zip(names, flags.tolist()) if f > 0]
        everywhere = [n for n, p in zip(names, present.tolist()) if p > 0]
        # the data are checked finite before each step: a non-finite loss is the model's, not a dataset's
        where = (f"on every dataset in the batch ({', '.join(everywhere)}): the model diverged"
                 if not culprits or culprits == everywhere else f"on dataset(s) {', '.join(culprits)}")
        kept = ckpt.list_checkpoints(self.ckpt_dir)
        msg = (f"non-finite {what} ({value}) at step {step} (iteration {i}) {where}; "
               f"stopping. Last good checkpoint: {kept[-1] if kept else 'none'}")
        logger.log({"kind": "error", "step": step, "message": msg}, flush=True)
        raise TrainingDivergedError(msg)

    def _check_data_fingerprints(self, plan) -> None:
        """Record (fresh run) or compare (resume) the data files' fingerprints (:mod:`opzoo.training.run_dir`)."""
        if self.env.is_main:
            sources = [part.source for part in self.data.train.datasets] + [te.source for _, te in self.data.test]
            rundir.record_or_check_data(self.run_dir, plan, sources)

    def _recall_step_zero(self, result: TrainResult) -> None:
        """A resumed run's step-0 (zero-shot) scores, from the eval file the first session wrote, so that the
        summary and the card still compare against them."""
        from .evaluate import read_results

        path = self.run_dir / "eval" / "step-00000000.json"
        if path.is_file():
            self._zero_shot = read_results(path)
            result.evals.setdefault(0, self._zero_shot)

    def export(self, out: Path) -> Path:
        """Save the trained model (EMA weights when on) as an opzoo repo with its data facts."""
        from ..builder import save_pretrained
        from .seen_data import training_record

        a = self.data.frame_shape
        with ema_weights(unwrap(self.wrapped), self.ema) as model:
            model.pretrained_cfg = {**getattr(model, "pretrained_cfg", {}), "resolution": list(a.resolution),
                                    "channels": a.channels, "in_timesteps": a.in_timesteps,
                                    "datasets": self.data.train.names, "trained_steps": self.cfg.training.steps,
                                    "training_data": training_record(self.cfg.data.datasets,
                                                                     [te for _, te in self.data.test])}
            return Path(save_pretrained(model, out, card=self._card()))

    def _card(self) -> str:
        """This run's model card: base model, data and splits, steps and lr, test errors, command."""
        from ..builder import resolve_weights
        from ..reference import parse_model_reference
        from .card import run_card

        name = self.cfg.model.name
        try:  # a saved repo always brings its weights, whatever model.pretrained says
            pretrained = True if parse_model_reference(name).saved else self.cfg.model.pretrained
            base = resolve_weights(name, pretrained)[1].removeprefix("weights: ")
        except OpzooError:  # a bare backbone name
            base = f"backbone {name}, random init"
        a = self.data.frame_shape
        datasets = [(d.path, te) for d, (_, te) in zip(self.cfg.data.datasets, self.data.test)]
        return run_card(model_name=name, from_scratch=self.from_scratch, base_weights=base, datasets=datasets,
                        steps=self.cfg.training.steps, lr=self.cfg.optimizer.lr, batch_size=self.cfg.training.batch_size,
                        seed=self.cfg.seed, zero_shot=self._zero_shot, final=self._last_eval or [],
                        command=self.command, resolution=a.resolution, channels=a.channels, in_timesteps=a.in_timesteps)

    def export_fsdp(self, out: Path) -> Path | None:
        """Gather the sharded weights (every rank) and save them from an unsharded copy (rank 0)."""
        weights = full_state_dict(self.wrapped, self.env, "fsdp")
        if not self.env.is_main:
            return None
        model = self.model
        copy = type(model)(model.config)
        copy.load_state_dict(weights)
        copy.preset_name = getattr(model, "preset_name", None)
        copy.pretrained_cfg = dict(getattr(model, "pretrained_cfg", {}))
        wrapped, self.wrapped = self.wrapped, copy
        try:
            return self.export(out)
        finally:
            self.wrapped = wrapped

    def _plot_losses(self, result: TrainResult) -> None:
        from .logger import read_log
        from .plots import plot_loss

        records = read_log(self.run_dir / "log.jsonl", kind=None)
        train = [r for r in records if r.get("kind") == "train"]
        evals = [r for r in records if r.get("kind") == "eval"]
        series = {}
        for name in self.data.train.names:
            series[name] = ([r["step"] for r in evals], [r[f"l2_full/{name}"] for r in evals])
        if train:
            plot_loss([r["step"] for r in train], [r["loss"] for r in train], self.run_dir / "loss.png", series,
                      title=f"{self.model_label()}: training loss and test error")

"""A run's memory plan, before its first step (docs/training.md, "Memory"): the peak of one training step for the
run's options (:func:`opzoo.training.memory.estimate_step_memory`, on a ``meta`` copy of the model: nothing is
allocated), against what the device has free (a GPU's ``mem_get_info``, else Linux's MemAvailable) or
``training.max_memory``.

A step that fits runs as asked. One that fits only with gradient checkpointing gets it, said in one line. One that does
not fit is refused in one line, before anything is allocated, naming the options that make it fit
(``--tune lora``, ``--batch-size``, checkpointing, bf16). ``opzoo finetune`` plans before it builds the model at full
size (:func:`check_before_build`), from the config and the files alone.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

import torch
from torch import nn

from ..errors import ConfigError
from .config import RunConfig
from .memory import StepMemory, StepPeak, estimate_step_memory, gib
from .tuning import TuneSpec, apply_tuning, parse_tune


@dataclasses.dataclass
class MemoryPlan:
    estimate: StepMemory | None  # None: the model's forward does not run on the meta device (``unestimated`` says why)
    budget: int  # bytes
    budget_source: str  # "--max-memory" or what the device has free
    grad_checkpointing: bool  # the run's, after the plan (turned on where it makes the step fit)
    turned_on: bool = False  # the plan turned checkpointing on
    unestimated: str = ""

    def line(self) -> str:
        if self.estimate is None:
            return (f"memory: not estimated ({self.unestimated}); the peak of the first steps is measured into "
                    f"memory.json")
        why = "; gradient checkpointing turned on: the step fits only with it" if self.turned_on else ""
        return (f"memory: a training step needs about {gib(self.estimate.total)} at its peak ({self.estimate.parts()})"
                f" of {gib(self.budget)} ({self.budget_source}){why}")

    def record(self) -> dict:
        return {"estimate": self.estimate.record() if self.estimate is not None else None,
                **({"unestimated": self.unestimated} if self.unestimated else {}), "budget": self.budget, "budget_source": self.budget_source,
                "grad_checkpointing": self.grad_checkpointing, "turned_on": self.turned_on}


def device_budget(device: torch.device, max_memory: float | None) -> tuple[int, str]:
    """``(bytes, where the number comes from)``: ``max_memory`` GiB, else what ``device`` has free now."""
    if max_memory is not None:
        return int(max_memory * 2**30), f"--max-memory {max_memory:g}"
    if device.type == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"free on {torch.cuda.get_device_name(device)}"
    from ..model_io.size_check import available_memory

    return available_memory(), "available on this machine (MemAvailable)"


def meta_copy(model: nn.Module) -> nn.Module:
    """``model``'s architecture on the ``meta`` device (its preset and pretrained_cfg kept): nothing allocated."""
    with torch.device("meta"):
        copy = type(model)(model.config)
    copy.preset_name = getattr(model, "preset_name", None)
    copy.pretrained_cfg = dict(getattr(model, "pretrained_cfg", {}) or {})
    return copy


def plan_memory(fitted: nn.Module, cfg: RunConfig, shape: tuple[int, ...], adapted: list[str],
                device: torch.device, world_size: int = 1) -> MemoryPlan:
    """The run's plan for ``fitted`` (the model fitted to its data, on any device; copied to ``meta`` here) on batches
    of ``shape`` (``[B per rank, *grid, T_in, C]``). Raises ConfigError, in one line, when the step cannot fit."""
    t = cfg.training
    budget, source = device_budget(device, t.max_memory)
    bf16 = (device.type == "cuda" and t.amp != "off") or t.amp == "bf16"
    sharded = world_size if cfg.distributed.strategy == "fsdp" and world_size > 1 else 1
    can_checkpoint = getattr(fitted, "supports_grad_checkpointing", False)

    def estimate(tune: TuneSpec, batch: int, checkpointing: bool, half: bool) -> StepMemory:
        model = meta_copy(fitted)
        apply_tuning(model, tune, adapted)
        step = estimate_step_memory(model, (batch, *shape[1:]), optimizer=cfg.optimizer.name,
                                    grad_checkpointing=checkpointing, bf16=half, ema=bool(t.ema))
        if sharded > 1:  # FSDP: each rank holds its shard of the weights, gradients and optimizer state
            step = dataclasses.replace(step, weights=step.weights // sharded, gradients=step.gradients // sharded,
                                       optimizer=step.optimizer // sharded)
        return step

    spec, batch = parse_tune(t.tune), shape[0]
    try:
        asked = estimate(spec, batch, t.grad_checkpointing, bf16)
    except (RuntimeError, NotImplementedError) as e:  # data-dependent ops (.item(), MoE dispatch) need real tensors
        why = f"{type(fitted).__name__}'s forward does not run on the meta device: {str(e).splitlines()[0][:120]}"
        return MemoryPlan(None, budget, source, t.grad_checkpointing, unestimated=why)
    if asked.total <= budget:
        return MemoryPlan(asked, budget, source, t.grad_checkpointing)
    if can_checkpoint and not t.grad_checkpointing:
        with_ckpt = estimate(spec, batch, True, bf16)
        if with_ckpt.total <= budget:
            return MemoryPlan(with_ckpt, budget, source, True, turned_on=True)
    options: list[tuple[str, TuneSpec, int, bool, bool]] = []
    if spec.mode != "lora":
        options.append(("--tune lora", parse_tune("lora"), batch, t.grad_checkpointing, bf16))
    if spec.mode == "full":
        options.append(("--tune head", parse_tune("head"), batch, t.grad_checkpointing, bf16))
    for smaller in sorted({max(1, batch // 4), max(1, batch // 2)}):
        if smaller < batch:
            options.append((f"--batch-size {smaller * world_size}", spec, smaller, t.grad_checkpointing, bf16))
    if can_checkpoint and not t.grad_checkpointing:
        options.append(("gradient checkpointing (training.grad_checkpointing: true)", spec, batch, True, bf16))
    if not bf16:
        options.append(("bf16 (training.amp: bf16)", spec, batch, t.grad_checkpointing, True))
    fits = []
    for label, *args in options:
        step = estimate(*args)
        if step.total <= budget:
            fits.append(f"{label} ({gib(step.total)})")
    if not fits:
        least = estimate(parse_tune("lora") if spec.mode != "lora" else spec, 1, can_checkpoint, True)
        held = least.weights + least.buffers + least.ema
        advice = (f"none of --tune lora, --batch-size {world_size}, checkpointing and bf16 fits alone; all of them need "
                  f"about {gib(least.total)}" + (
                      "" if least.total <= budget else
                      f"; its weights alone take {gib(held)}: train it on a device with more memory, or sharded over "
                      f"several (distributed.strategy: fsdp)" if held > budget else
                      "; give a smaller grid (--resolution) or a device with more memory"))
    else:
        advice = "it fits with " + " or ".join(fits)
    raise ConfigError(f"{cfg.model.name}: a training step needs about {gib(asked.total)} at its peak "
                      f"({asked.parts()}), more than the {gib(budget)} {source}; {advice}")


def check_before_build(cfg: RunConfig, say: Callable[[str], None] = lambda line: None) -> MemoryPlan | None:
    """The plan of ``cfg`` made from the config and its files alone, before the model is built at full size: the
    model on ``meta`` (no weights read), fitted to the files there. None where the model cannot be built without its
    files (a saved repo, a Hub id): the Trainer plans it once it is built."""
    from .build import build_run_model, fit_run_data, open_datasets
    from .distributed import DistEnv, pick_device

    ref = cfg.model.reference
    if ref.saved or ref.kind == "hub":
        return None
    with torch.device("meta"):
        meta = build_run_model(dataclasses.replace(cfg.model, pretrained=False))
        fitted = fit_run_data(meta, cfg, open_datasets(cfg))
    from .tuning import adapted_tensors

    world = int(os.environ.get("WORLD_SIZE", "1"))
    shape = run_batch_shape(cfg, fitted, world)
    plan = plan_memory(fitted.model, cfg, shape, adapted_tensors(meta, fitted.model),
                       pick_device(cfg.training.device, DistEnv()), world)
    return plan if plan.estimate is not None else None


def run_batch_shape(cfg: RunConfig, fitted, world_size: int = 1) -> tuple[int, ...]:
    """``[B per rank, *grid, T_in, C]`` of the run's training batches (``fitted``: the run's fit)."""
    f = fitted.frame_shape
    return (max(1, cfg.training.batch_size // max(1, world_size)), *f.resolution, f.in_timesteps,
            fitted.model.config.in_channels)


__all__ = ["StepPeak", "MemoryPlan", "plan_memory", "check_before_build", "device_budget", "meta_copy", "run_batch_shape"]

"""The memory of one training step: estimated before the model is built (:func:`estimate_step_memory`, on the
``meta`` device), and measured while a step runs (:class:`PeakTensorMemory`; ``torch.cuda.max_memory_allocated`` on a
GPU). The one estimator of opzoo: a run's memory plan (:mod:`opzoo.training.memory_plan`), ``opzoo compare``'s cost
table and ``opzoo benchmark`` read it.

What a step holds at its peak (the second step on: the optimizer's state exists by then), in bytes:

    weights + buffers + batch + EMA copy + optimizer state + max(activations, gradients + the update's temporaries)

- gradients and optimizer state are those of the *trainable* parameters only (AdamW and Adam keep two moments, SGD
  one), in float32;
- activations are what autograd keeps for backward, counted by running the forward on the meta device
  (:func:`saved_activation_bytes`), plus the largest tensor the step computes beside them (the output and the loss's
  temporaries); with gradient checkpointing, only the blocks' inputs are kept, and one block's activations come back
  at a time in backward;
- backward frees the activations as it fills the gradients, so the two do not add up (measured: the peak of a
  step is its forward's, or its update's); the update's temporaries are counted as half the gradients (measured:
  0.1 to 0.45 of them, torch 2.14's foreach AdamW).

Measured on a GPU this is what ``torch.cuda.max_memory_allocated`` counts, and on a CPU what
:class:`PeakTensorMemory` counts: the tensors alive at once. Neither counts the allocator's cache, the CUDA context or
the libraries' code, which a device must also hold (docs/benchmarks.md, "Memory of a training step").
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from typing import Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

OPTIMIZER_MOMENTS = {"adamw": 2, "adam": 2, "sgd": 1}


class FusedAttentionOnMeta(torch.overrides.TorchFunctionMode):
    """``F.scaled_dot_product_attention`` on the meta device as a real device runs it: a fused kernel that keeps the
    output and the softmax's log-sum-exp for backward (CPU's flash attention; a GPU's flash or memory-efficient one),
    not the attention matrix the meta device's math path keeps (``[B, heads, L, L]``: measured 35 MiB against 4 MiB
    at 1024 tokens of 4 heads of 32). Dropout, or a mask that needs a gradient (a learned position bias), takes the
    math path on a real CPU too, and is left to it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention and len(args) == 3 and \
                set(kwargs) <= {"attn_mask", "dropout_p", "is_causal", "scale"}:
            q, k, v = args
            mask = kwargs.get("attn_mask")
            # a real CPU's rule: dropout or a mask that needs a gradient (a learned position bias) take the math path
            if q.device.type == "meta" and q.dim() == k.dim() == v.dim() in (3, 4) and \
                    not kwargs.get("dropout_p", 0.0) and (mask is None or not mask.requires_grad):
                one = q.dim() == 3  # the fused kernel takes [B, heads, L, c]
                if one:
                    q, k, v = q[None], k[None], v[None]
                    mask = mask[None] if mask is not None and mask.dim() == 3 else mask
                try:
                    out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                        q, k, v, 0.0, kwargs.get("is_causal", False), attn_mask=mask, scale=kwargs.get("scale"))[0]
                except RuntimeError:  # a layout the fused kernel does not take (a CPU falls back to the math path too)
                    return func(*args, **kwargs)
                return out[0] if one else out
        return func(*args, **kwargs)


def saved_activation_bytes(forward: Callable[[], torch.Tensor], parameters: Iterable[torch.Tensor]) -> int:
    """Bytes of the tensors autograd keeps from ``forward()`` for backward (each storage once, the parameters
    left out): the activation memory of a training step, at the dtype it runs in. On the meta device, attention keeps
    what a real device's fused kernel keeps (:class:`FusedAttentionOnMeta`)."""
    params = {p.untyped_storage()._cdata for p in parameters}
    kept: dict[int, torch.UntypedStorage] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in params:
            kept[storage._cdata] = storage
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), FusedAttentionOnMeta():
        out = forward()
    nbytes = sum(s.nbytes() for s in kept.values())
    del out
    return nbytes


class PeakTensorMemory(TorchDispatchMode):
    """The peak bytes of tensors alive at once while the mode is on: every storage an op allocates is counted until
    it is freed (a view or an in-place result is its input's storage, not a new one), on top of ``base`` (what was
    alive before: the weights, the optimizer state, the batch). On a CPU this is what a GPU's
    ``max_memory_allocated`` counts; the allocator's own caching and the libraries' workspaces are not in it."""

    def __init__(self, base: int = 0):
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = self.peak = base

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {id(a.untyped_storage()) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)
                  and a.device.type != "meta"}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = id(storage)
            if key in self.live or key in inputs:
                continue
            self.live[key] = storage.nbytes()
            self.now += self.live[key]
            weakref.finalize(storage, self._freed, key)
        self.peak = max(self.peak, self.now)
        return out


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of ``tensors``' storages, each counted once."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            s = t.untyped_storage()
            seen[id(s)] = s.nbytes()
    return sum(seen.values())


@dataclasses.dataclass
class StepMemory:
    """Bytes of one training step's peak, by part (the module doc's sum)."""

    weights: int
    buffers: int
    gradients: int
    optimizer: int
    activations: int
    batch: int
    ema: int = 0
    trainable: int = 0  # parameters (a count, not bytes)
    parameters: int = 0
    grad_checkpointing: bool = False

    @property
    def total(self) -> int:
        # backward frees the activations as it fills the gradients: the two peaks do not add up
        update = self.gradients + self.gradients // 2  # the gradients, and the update's temporaries
        return self.weights + self.buffers + self.batch + self.ema + self.optimizer + max(self.activations, update)

    def parts(self) -> str:
        """``weights 2.3 GiB, gradients ...``: the parts of the sum, for a one-line refusal or a plan's line."""
        names = (("weights", self.weights + self.buffers), ("gradients", self.gradients),
                 ("optimizer state", self.optimizer), ("activations", self.activations), ("batch", self.batch),
                 ("EMA", self.ema))
        return ", ".join(f"{k} {gib(v)}" for k, v in names if v or k in ("weights", "activations"))

    def record(self) -> dict:
        return {**dataclasses.asdict(self), "total": self.total}


def gib(nbytes: float) -> str:
    """``1.23 GiB`` or ``45.6 MiB``."""
    return f"{nbytes / 2**30:.3g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.3g} MiB"


def estimate_step_memory(model: torch.nn.Module, shape: tuple[int, ...], *, out_frames: int | None = None,
                         optimizer: str = "adamw", grad_checkpointing: bool = False, bf16: bool = False,
                         ema: bool = False, forward: Callable | None = None) -> StepMemory:
    """The peak of one training step of ``model`` (on any device: ``meta`` allocates nothing) on a batch of ``shape``
    (``[B, *S, T_in, C]``), with the trainable parameters as they are (``requires_grad``). ``out_frames``: the target's
    frames (the model's ``out_timesteps``); ``forward``: how the step calls the model (default ``model(x)``);
    ``bf16``: autocast to bfloat16 (activations and the batch's forward copies at two bytes)."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in params)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    c, t_out = shape[-1], out_frames if out_frames is not None else getattr(model.config, "out_timesteps", 1)
    x_bytes = 4 * int(torch.Size(shape).numel())
    y_bytes = 4 * int(torch.Size((*shape[:-2], t_out, c)).numel())
    batch = 2 * x_bytes + y_bytes + 4 * int(torch.Size((*shape[:-2], t_out, 1)).numel())  # x, noisy x, y, mask
    was_training, was_checkpointing = model.training, getattr(model, "grad_checkpointing", False)
    model.train()
    if hasattr(model, "set_grad_checkpointing") and grad_checkpointing != was_checkpointing:
        model.set_grad_checkpointing(grad_checkpointing)
    try:
        # values only where they are real (a model may refuse a constant window: RevIN)
        x = torch.empty(shape, device=device) if device.type == "meta" else torch.randn(shape, device=device)
        run = forward or model
        kept: list[int] = []

        def step() -> torch.Tensor:
            with torch.autocast(device_type="cpu" if device.type == "meta" else device.type, dtype=torch.bfloat16,
                                enabled=bf16):
                out = run(x)
            kept.append(out.numel() * out.element_size())
            return out

        activations = saved_activation_bytes(step, params)
        # gradients (and their optimizer state) exist for the trainable parameters the loss reaches, only; with
        # routers, which experts a batch reaches changes from batch to batch: a step's gradients are those it reaches,
        # and the optimizer holds a state for every expert (each is chosen some time in a run)
        reached = _reached(step, trainable)
        stateful = trainable if _routes(model) else reached
        if grad_checkpointing:  # one block's activations come back at a time in backward
            model.set_grad_checkpointing(False)
            full = saved_activation_bytes(step, params)
            activations += full // max(1, _blocks(model))
            model.set_grad_checkpointing(True)
    finally:
        if hasattr(model, "set_grad_checkpointing") and getattr(model, "grad_checkpointing", False) != was_checkpointing:
            model.set_grad_checkpointing(was_checkpointing)
        model.train(was_training)
    # the output and its loss's temporaries (the difference, its square, a mask broadcast) live beside the activations
    activations += 3 * max(kept[0], y_bytes)
    moments = OPTIMIZER_MOMENTS.get(optimizer, 2)
    grads = sum(p.numel() * p.element_size() for p in reached)
    state = sum(p.numel() * p.element_size() for p in stateful)
    return StepMemory(weights=weights, buffers=buffers, gradients=grads, optimizer=moments * state,
                      activations=activations, batch=batch, ema=weights + buffers if ema else 0,
                      trainable=sum(p.numel() for p in trainable), parameters=sum(p.numel() for p in params),
                      grad_checkpointing=grad_checkpointing)


def measured_step_peak(model: torch.nn.Module, shape: tuple[int, ...], steps: int = 2, seed: int = 0,
                       steady: bool = False) -> int:
    """The peak bytes of tensors alive during ``steps`` training steps of ``model`` (as it is: its trainable
    parameters, its checkpointing) on random batches of ``shape``, as a run's step computes them (denoising noise,
    masked relative L2 plus any auxiliary loss, backward, gradient clipping, AdamW): what :class:`StepPeak` records
    in a run, for the benchmark and the tests of :func:`estimate_step_memory`. ``steady``: AdamW's state made first for
    every trainable parameter (a step of zero gradients at lr 0), as a long run holds it: a routed model's first steps
    reach only the experts its router chose."""
    from ..evaluation.l2 import relative_l2_loss

    g = torch.Generator().manual_seed(seed)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable)
    if steady:
        for p in trainable:
            p.grad = torch.zeros_like(p)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.param_groups[0]["lr"] = 0.0
        optimizer.step()
        optimizer.param_groups[0]["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
    c = model.config
    x = torch.randn(shape, generator=g)
    y = torch.randn(*shape[:-2], c.out_timesteps, shape[-1], generator=g)
    mask = torch.ones(*shape[:-2], c.out_timesteps, 1)
    peak = 0
    for _ in range(steps):
        state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        with PeakTensorMemory(tensor_bytes([*model.parameters(), *model.buffers(), *state, x, y, mask])) as mode:
            optimizer.zero_grad(set_to_none=True)
            noisy = x + 1e-3 * torch.randn_like(x)
            loss = relative_l2_loss(model(noisy), y, mask)
            if callable(getattr(model, "aux_loss", None)):
                loss = loss + model.aux_loss()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            optimizer.step()
        peak = max(peak, mode.peak)
    return peak


MEASURED_STEPS = 2  # the second step is the first with the optimizer's state already held: a run's steady peak


class StepPeak:
    """A run's measured peak over its first :data:`MEASURED_STEPS` steps (of this process): a GPU's
    ``max_memory_allocated``, else :class:`PeakTensorMemory` over what the step starts with; ``write`` records it
    beside the plan's estimate in the run's ``memory.json``."""

    def __init__(self, device: torch.device, measure: bool = True):
        self.device, self.measure = device, measure
        self.peaks: list[int] = []
        self.written = False

    @contextlib.contextmanager
    def measuring(self, k: int, held: Iterable[torch.Tensor]):
        """Around the ``k``-th step of this process (1-based); ``held``: the tensors it starts with."""
        if not self.measure or k > MEASURED_STEPS:
            yield
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            yield
            torch.cuda.synchronize(self.device)
            self.peaks.append(torch.cuda.max_memory_allocated(self.device))
            return
        with PeakTensorMemory(tensor_bytes(held)) as mode:
            yield
        self.peaks.append(mode.peak)

    def done_after(self, k: int) -> bool:
        return self.measure and not self.written and k == MEASURED_STEPS

    def write(self, run_dir, plan, logger, step: int) -> None:
        """``memory.json`` (the plan and the measured peak) and a ``memory`` record in the log."""
        import json
        import logging
        from pathlib import Path

        from ..files import atomic_write

        if not self.peaks or self.written:
            return
        self.written = True
        peak = max(self.peaks)
        estimate = plan.estimate.total if plan.estimate is not None else None
        how = ("torch.cuda.max_memory_allocated" if self.device.type == "cuda" else
               "tensors alive at once (opzoo.training.memory.PeakTensorMemory)")
        record = {**plan.record(), "measured_peak": peak, "measured_steps": len(self.peaks), "measured_as": how,
                  "device": str(self.device),
                  "estimate_over_measured": round(estimate / max(1, peak), 4) if estimate is not None else None}
        atomic_write(Path(run_dir) / "memory.json", json.dumps(record, indent=2) + "\n")
        logger.log({"kind": "memory", "step": step, "estimated": estimate, "measured": peak}, flush=True)
        logging.getLogger("opzoo").info(f"memory: measured peak {gib(peak)} over the first {len(self.peaks)} step(s) "
                                        f"(estimated {gib(estimate) if estimate is not None else 'not'}; memory.json)")


def _routes(model: torch.nn.Module) -> bool:
    from ..contracts.routing import Router

    return any(isinstance(m, Router) for m in model.modules())


def _reached(forward: Callable[[], torch.Tensor], trainable: list[torch.Tensor]) -> list[torch.Tensor]:
    """The parameters of ``trainable`` a loss on ``forward()`` gives a gradient (on meta: no memory, no arithmetic):
    The Well's published FNO computes nothing with its blocks' weights, and AdamW keeps no state for them."""
    if not trainable:
        return []
    out = forward()
    if not out.requires_grad:
        return []
    grads = torch.autograd.grad(out.sum(), trainable, allow_unused=True)
    return [p for p, g in zip(trainable, grads) if g is not None]


def _blocks(model: torch.nn.Module) -> int:
    layers = getattr(model, "num_layers", None)
    return max(1, layers() - 2) if callable(layers) else 1


__all__ = ["saved_activation_bytes", "PeakTensorMemory", "StepPeak", "MEASURED_STEPS", "measured_step_peak", "StepMemory", "estimate_step_memory", "tensor_bytes", "gib"]

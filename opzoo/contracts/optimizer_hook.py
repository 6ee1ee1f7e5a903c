"""The optimizer-hook interface: how plugins change initialization, parameter groups and per-step
learning rates, and observe training steps (opzoo-mup builds μP and FLeRM on it).

A plugin subclasses :class:`OptimizerHook`, registers the class with
``registry.register_optimizer_hook(name, cls)`` in its ``opzoo_register_components`` hook, and a
run config names it: ``optimizer: {hooks: [{name: NAME, args: {...}}]}``. The trainer constructs
``cls(**args)`` and calls, in order:

1. ``on_model_built(model)`` once, after the model is built (and pretrained weights loaded),
   before it is moved to a device or wrapped for DDP: re-initialize or rescale parameters here.
2. ``param_groups(model, groups)`` once: receive the current groups (a list of dicts with
   ``params``, ``names`` and ``lr_scale``) and return a new list (or ``None`` to keep them).
   One group per tensor is allowed. ``lr_scale`` is a constant multiplier of the group's lr;
   any other AdamW option (``weight_decay``, ``betas``) may be set per group.
3. Every step, after backward (gradients are reduced across ranks and unscaled):
   ``before_optimizer_step(ctx)`` (e.g. element-wise gradient clipping), then
   ``lr_multipliers(ctx)`` -> ``None`` or one float per group, then the optimizer step,
   then ``after_optimizer_step(ctx)`` (e.g. an extra forward/backward on a fresh batch).
4. ``state_dict()`` / ``load_state_dict(state)`` for checkpoints: a flat ``{str: Tensor | JSON value}``.

The learning rate of group ``g`` at step ``t`` is
``lr · schedule(t) · lr_scale_g · Π_hooks multiplier_g(t)``, so hooks compose with any schedule.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor, nn


@dataclasses.dataclass
class StepContext:
    """What a hook sees of one training step.

    ``model`` is the unwrapped module (not the DDP wrapper); ``batch`` the rank's batch
    (``x [B, *S, T_in, C]``, ``y [B, *S, T_out, C]``, ``mask [B, C]``, ``dataset [B]``);
    ``loss`` the rank-averaged training loss of this step (a float, before the update for
    ``before_optimizer_step``). ``fresh_batch(index=0)`` draws another batch of the training mixture
    (a function of (seed, step, index): the same on resume; different indices give different
    batches, e.g. for several estimates in one step); ``loss_fn(pred, batch)`` is the training loss;
    ``forward(x)`` runs the model under the run's autocast; ``all_reduce_mean(t)`` averages a
    tensor across ranks (identity with one process). ``base_lr`` is ``lr · schedule(step)``.
    ``run_dir`` is the run's output directory (where a hook may write its own files; rank 0 only).
    ``record`` is this step's ``log.jsonl`` record: a hook may add JSON fields to it (in
    ``before_optimizer_step``); ``log(record)`` writes another record (e.g. a ``{"kind": "warning", ...}``).
    """

    step: int
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: Mapping[str, Tensor]
    loss: float
    base_lr: float
    fresh_batch: Callable[..., Mapping[str, Tensor]]
    loss_fn: Callable[[Tensor, Mapping[str, Tensor]], Tensor]
    forward: Callable[[Tensor], Tensor]
    all_reduce_mean: Callable[[Tensor], Tensor]
    world_size: int = 1
    rank: int = 0
    run_dir: Path | None = None
    record: dict[str, Any] = dataclasses.field(default_factory=dict)
    log: Callable[[dict[str, Any]], None] = lambda record: None


class OptimizerHook:
    """Base class of optimizer hooks; every method is optional (the defaults change nothing)."""

    def on_model_built(self, model: nn.Module) -> None:
        """Re-initialize or rescale parameters of the freshly built model."""

    def param_groups(self, model: nn.Module, groups: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Return new parameter groups (dicts with ``params``, ``names``, optional ``lr_scale``)."""
        return None

    def before_optimizer_step(self, ctx: StepContext) -> None:
        """Gradients are final (reduced, clipped); parameters not yet updated."""

    def lr_multipliers(self, ctx: StepContext) -> Sequence[float] | None:
        """One multiplier per parameter group for this step, or None for all 1."""
        return None

    def after_optimizer_step(self, ctx: StepContext) -> None:
        """Parameters were updated; ``ctx.optimizer.param_groups[g]['lr']`` holds the lr just used."""

    def state_dict(self) -> dict[str, Any]:
        """Flat ``{str: Tensor | JSON value}`` saved in checkpoints."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""


__all__ = ["OptimizerHook", "StepContext"]

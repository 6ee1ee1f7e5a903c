"""Expert-load logging for any model with routers: global per-router loads and a collapse warning."""

from __future__ import annotations

import warnings
from collections import deque

import torch
from torch import Tensor, nn

from ..contracts.routing import aux_losses, expert_counts, named_routers
from .hooks import OptimizerHook, StepContext


class ExpertCollapseWarning(UserWarning):
    """One expert took more than the threshold of a router's assignments over a whole window of steps."""


def step_counts(model: nn.Module, reduce=None) -> dict[str, Tensor]:
    """This step's assignments per expert of every router, ``{name: [E]}``, summed over ranks by
    ``reduce`` (a mean-all-reduce of one flat tensor; the fractions are the same as for a sum)."""
    counts = expert_counts(model)
    if not counts:
        return {}
    flat = torch.cat([c.reshape(-1).cpu() for c in counts.values()])
    if reduce is not None:
        flat = reduce(flat)
    return dict(zip(counts, flat.split([c.numel() for c in counts.values()])))


class ExpertLoadMonitor:
    """Warns when one expert takes more than ``threshold`` of a router's assignments, summed over
    the last ``window`` steps; warns once per router until its top share falls back below the threshold."""

    def __init__(self, threshold: float = 0.9, window: int = 50):
        self.threshold, self.window = threshold, window
        self.history: dict[str, deque[Tensor]] = {}
        self.collapsed: set[str] = set()

    def update(self, step: int, counts: dict[str, Tensor]) -> list[str]:
        """Add one step's counts; returns the warning messages issued at this step."""
        messages = []
        for name, c in counts.items():
            h = self.history.setdefault(name, deque(maxlen=self.window))
            h.append(c.float())
            if len(h) < self.window:
                continue
            total = torch.stack(list(h)).sum(0)
            if total.sum() <= 0:
                continue
            share = total / total.sum()
            top, expert = float(share.max()), int(share.argmax())
            if top > self.threshold and name not in self.collapsed:
                self.collapsed.add(name)
                msg = (f"step {step}: router {name!r} sent {top:.1%} of its assignments over the last {self.window} "
                       f"steps to expert {expert} (threshold {self.threshold:.0%}); the other experts are nearly "
                       f"idle (raise the balance-loss weight, or add router noise)")
                warnings.warn(msg, ExpertCollapseWarning, stacklevel=2)
                messages.append(msg)
            elif top <= self.threshold:
                self.collapsed.discard(name)
        return messages


class RouterMonitor(OptimizerHook):
    """The built-in step hook of a model with routers (:func:`router_monitor`): adds this step's router losses
    (``aux_loss`` weighted total, ``aux/<group>`` unweighted, this rank's) to the step's log record, and every
    ``log_every`` steps the global expert loads (all ranks); warns (and logs) on expert collapse."""

    def __init__(self, threshold: float = 0.9, window: int = 50, log_every: int = 1):
        self.monitor, self.log_every = ExpertLoadMonitor(threshold, window), log_every

    def before_optimizer_step(self, ctx: StepContext) -> None:
        step, model = ctx.step + 1, ctx.model
        losses = {f"aux/{g}": float(v.detach()) for g, v in aux_losses(model).items()}
        if losses:
            losses["aux_loss"] = float(model.aux_loss().detach())
        counts = step_counts(model, reduce=ctx.all_reduce_mean)
        for msg in self.monitor.update(step, counts):
            ctx.log({"kind": "warning", "step": step, "message": msg})
        ctx.record.update(losses)
        if step % self.log_every == 0:
            ctx.record["expert_load"] = {n: [round(float(v), 6) for v in c / c.sum().clamp_min(1e-12)]
                                         for n, c in counts.items()}


def router_monitor(model: nn.Module, threshold: float, window: int, log_every: int) -> list[RouterMonitor]:
    """``[RouterMonitor]`` for a model with routers, else ``[]``."""
    return [RouterMonitor(threshold, window, log_every)] if any(True for _ in named_routers(model)) else []


__all__ = ["ExpertCollapseWarning", "ExpertLoadMonitor", "RouterMonitor", "router_monitor", "step_counts"]

"""Expert-load logging for any model with routers: global per-router loads and a collapse warning."""

from __future__ import annotations

import warnings
from collections import deque

import torch
from torch import Tensor, nn

from ..routing import expert_counts


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


__all__ = ["ExpertCollapseWarning", "ExpertLoadMonitor", "step_counts"]

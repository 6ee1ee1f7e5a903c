"""Learning-rate schedules as pure functions of the step (so a resumed run needs only the step)."""

from __future__ import annotations

import math


def one_cycle_factor(step: int, total: int, pct_start: float, div_factor: float, final_div_factor: float) -> float:
    """lr(step) / max_lr of PyTorch's ``OneCycleLR`` (two phases, cosine annealing).

    Warm-up from ``1/div_factor`` to 1 over ``pct_start·total − 1`` steps, then down to
    ``1/(div_factor·final_div_factor)`` at step ``total − 1``.
    """
    initial = 1.0 / div_factor
    final = initial / final_div_factor
    end_up = float(pct_start * total) - 1
    end_down = float(total) - 1
    if step <= end_up:
        pct = step / end_up if end_up > 0 else 1.0
        return _cos_anneal(initial, 1.0, pct)
    span = end_down - end_up
    pct = (step - end_up) / span if span > 0 else 1.0
    return _cos_anneal(1.0, final, min(pct, 1.0))


def _cos_anneal(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def cosine_factor(step: int, total: int, warmup: float) -> float:
    """Linear warm-up over ``warmup·total`` steps, then cosine decay to 0."""
    n_warm = int(warmup * total)
    if step < n_warm:
        return (step + 1) / n_warm
    pct = (step - n_warm) / max(1, total - n_warm)
    return 0.5 * (1 + math.cos(math.pi * min(pct, 1.0)))


def schedule_factor(section, step: int, total: int) -> float:
    """The multiplier of ``optimizer.lr`` at ``step`` for a run config's ``schedule`` section."""
    if section.name == "constant":
        return 1.0
    if section.name == "cosine":
        return cosine_factor(step, total, section.warmup)
    return one_cycle_factor(step, total, section.warmup, section.div_factor, section.final_div_factor)

"""The optimizer factory: parameter groups (through hooks), AdamW defaults, per-step learning rates."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from ..errors import ConfigError
from .hooks import OptimizerHook, default_param_groups


def build_param_groups(model: nn.Module, section, hooks: Sequence[OptimizerHook]) -> list[dict[str, Any]]:
    """Default groups, then each hook's ``param_groups`` in order; checked to cover every parameter once."""
    groups = default_param_groups(model, section.weight_decay)
    for hook in hooks:
        new = hook.param_groups(model, groups)
        if new is not None:
            groups = [dict(g) for g in new]
    names_of = {id(p): n for n, p in model.named_parameters()}
    seen: dict[int, int] = {}
    for gi, g in enumerate(groups):
        g["params"] = list(g["params"])
        g.setdefault("names", [names_of.get(id(p), f"?{i}") for i, p in enumerate(g["params"])])
        g.setdefault("lr_scale", 1.0)
        for p in g["params"]:
            if id(p) in seen:
                raise ConfigError(f"parameter {names_of.get(id(p))!r} is in parameter groups {seen[id(p)]} and {gi}")
            seen[id(p)] = gi
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    left = [names_of[i] for i in trainable - set(seen)]
    if left:
        raise ConfigError(f"optimizer hooks left trainable parameters out of every group: {', '.join(sorted(left))}")
    return groups


def build_optimizer(groups: list[dict[str, Any]], section) -> torch.optim.Optimizer:
    """AdamW (default β = (0.9, 0.9), wd 1e-6), Adam or SGD over ``groups``; lr is set every step."""
    if section.name == "sgd":
        return torch.optim.SGD(groups, lr=section.lr, momentum=section.betas[0], weight_decay=section.weight_decay)
    cls = torch.optim.AdamW if section.name == "adamw" else torch.optim.Adam
    return cls(groups, lr=section.lr, betas=tuple(section.betas), eps=section.eps, weight_decay=section.weight_decay)


def set_learning_rates(optimizer: torch.optim.Optimizer, base_lr: float, multipliers: Sequence[float]) -> None:
    """``lr_g = base_lr · lr_scale_g · multiplier_g`` for every group ``g``."""
    for group, mult in zip(optimizer.param_groups, multipliers):
        group["lr"] = base_lr * group.get("lr_scale", 1.0) * mult

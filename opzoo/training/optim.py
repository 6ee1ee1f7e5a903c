"""The optimizer factory: parameter groups (through hooks), AdamW defaults, per-step learning rates."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from ..errors import ConfigError
from .hooks import OptimizerHook, default_param_groups


def fine_tuning_groups(model: nn.Module, weight_decay: float, filter_bias_and_norm: bool = True,
                       layer_decay: float | None = None) -> list[dict[str, Any]]:
    """Trainable parameters grouped by (decays, layer): with ``filter_bias_and_norm``, ``model.no_weight_decay()``
    trains with weight decay 0; with ``layer_decay``, a parameter of layer ``l`` (``model.layer_id``, of
    ``model.num_layers()``) gets ``lr_scale = layer_decay ** (L - 1 - l)`` (BEiT's / timm's layer decay)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not filter_bias_and_norm and layer_decay is None:
        return default_param_groups(model, weight_decay)
    for method in (["no_weight_decay"] if filter_bias_and_norm else []) + (["layer_id"] if layer_decay else []):
        if not callable(getattr(model, method, None)):
            raise ConfigError(f"{type(model).__name__} has no {method}(): it is not an opzoo Backbone; set "
                              f"optimizer.filter_bias_and_norm: false and optimizer.layer_decay: null")
    exempt = model.no_weight_decay() if filter_bias_and_norm else set()
    n_layers = model.num_layers() if layer_decay else 1
    groups: dict[tuple[bool, int], dict[str, Any]] = {}
    for name, p in named:
        layer = model.layer_id(name) if layer_decay else 0
        decays = name not in exempt
        g = groups.setdefault((decays, layer), {
            "params": [], "names": [], "weight_decay": weight_decay if decays else 0.0,
            "lr_scale": layer_decay ** (n_layers - 1 - layer) if layer_decay else 1.0})
        g["params"].append(p)
        g["names"].append(name)
    return list(groups.values())


def build_param_groups(model: nn.Module, section, hooks: Sequence[OptimizerHook]) -> list[dict[str, Any]]:
    """The fine-tuning groups (:func:`fine_tuning_groups`), then each hook's ``param_groups`` in order; checked to
    cover every parameter once."""
    groups = fine_tuning_groups(model, section.weight_decay, section.filter_bias_and_norm, section.layer_decay)
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

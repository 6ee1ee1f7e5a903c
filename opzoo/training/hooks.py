"""The trainer's side of optimizer hooks: the default parameter groups, building the hooks a run config names,
combining their learning-rate multipliers, and their checkpointed state. The interface plugins implement,
:class:`OptimizerHook` and :class:`StepContext`, is with the other contracts (:mod:`opzoo.contracts.optimizer_hook`),
and importable from here as before."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import Tensor, nn

from ..contracts.optimizer_hook import OptimizerHook, StepContext


def default_param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """One group of every trainable parameter, with their names (for hooks and checkpoints)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for _, p in named], "names": [n for n, _ in named], "lr_scale": 1.0,
             "weight_decay": weight_decay}]


def build_hooks(specs: Sequence[Any], registry=None) -> list[OptimizerHook]:
    """Instantiate the hooks named in a run config (``[{name, args}]``) from the registry."""
    from ..errors import ConfigError
    from ..registry.registry import get_registry

    registry = registry or get_registry()
    hooks = []
    for spec in specs:
        cls = registry.get("optimizer_hook", spec.name)
        try:
            hook = cls(**spec.args)
        except TypeError as e:
            raise ConfigError(f"optimizer.hooks: {spec.name!r} does not accept args {spec.args}: {e}") from None
        if not isinstance(hook, OptimizerHook):
            raise ConfigError(f"optimizer hook {spec.name!r} builds a {type(hook).__name__}, not an opzoo OptimizerHook")
        hooks.append(hook)
    return hooks


def combined_multipliers(hooks: Sequence[OptimizerHook], ctx: StepContext, n_groups: int) -> list[float]:
    """The product of all hooks' per-group multipliers for this step."""
    out = [1.0] * n_groups
    for hook in hooks:
        mults = hook.lr_multipliers(ctx)
        if mults is None:
            continue
        mults = list(mults)
        if len(mults) != n_groups:
            raise ValueError(f"{type(hook).__name__}.lr_multipliers returned {len(mults)} values for {n_groups} parameter groups")
        out = [a * float(b) for a, b in zip(out, mults)]
    return out


def split_hook_state(state: Mapping[str, Any], prefix: str) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Split a hook's state into tensors (for safetensors) and JSON values."""
    tensors, plain = {}, {}
    for k, v in state.items():
        if isinstance(v, Tensor):
            tensors[f"{prefix}{k}"] = v.detach().cpu().contiguous()
        else:
            plain[k] = v
    return tensors, plain

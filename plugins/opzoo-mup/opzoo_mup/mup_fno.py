"""μP for spectral weights (μTransfer-FNO, Li et al. 2025, Theorem 3.5): the ``mup-fno`` optimizer hook.

Relative to a base (proxy) model keeping ``N0`` Fourier modes, every spectral weight of a model
keeping ``N = prod(modes)`` modes gets its initialization and its Adam learning rate multiplied by

    c(N) = sqrt(log N0 / log N)        (N, N0 >= 2; = sqrt(log K0 / log K) for isotropic K^d)

(Theorem 3.5: b(K) = c(K) = Θ(1/sqrt(d log K)); Algorithm 1, lines 4-5: lr · c, init variance · c²).
Everything else keeps multiplier 1. Spectral weights are what layers mark through the public
protocol :class:`opzoo.SpectralLayer` (``spectral_weights(spatial_dims)``), found with
:func:`opzoo.find_spectral_weights`. Optionally, the gradients of spectral weights are clipped
element-wise (real and imaginary parts separately) at ``grad_clip`` (the paper's FNO-3D uses 0.01).

Theorem 3.5 is derived for Adam only: with another optimizer (SGD, ...) the hook refuses to run
(before the first update) unless ``allow_non_adam: true``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
from torch import nn

import opzoo
from opzoo.training import OptimizerHook, StepContext

HOOK_NAME = "mup-fno"
ADAM_SCOPE = ("the paper's scope (μTransfer-FNO, Sec. 3): \"the Maximal Update Parametrization is "
              "optimizer-dependent … In our work, we focus on the Adam optimizer\"")
ADAM_OPTIMIZERS = ("adam", "adamw")


def non_adam_error(optimizer: str) -> opzoo.ConfigError:
    """The config error for ``mup-fno`` with a non-Adam optimizer (``optimizer`` as named in the run config)."""
    return opzoo.ConfigError(
        f"optimizer.hooks: {HOOK_NAME}: optimizer {optimizer!r} is outside {ADAM_SCOPE}; Theorem 3.5's "
        "sqrt(log N0 / log N) scaling is the Adam one. Use optimizer.name: adam or adamw, or set "
        f"{HOOK_NAME} args allow_non_adam: true to apply it anyway")


def mup_factor(n_modes: int, base_n_modes: int) -> float:
    """``sqrt(log N0 / log N)``: the init-std and Adam-lr multiplier of a spectral weight."""
    if base_n_modes < 2:
        raise opzoo.ConfigError(f"{HOOK_NAME}: base_modes: the base keeps N0 = {base_n_modes} modes; "
                                "μP for spectral weights needs N0 >= 2 (log N0 > 0)")
    if n_modes < 2:
        raise opzoo.ConfigError(f"{HOOK_NAME}: modes: a spectral weight keeping N = {n_modes} modes cannot be "
                                "scaled (N >= 2 needed, log N > 0)")
    return math.sqrt(math.log(base_n_modes) / math.log(n_modes))


class MuPFNO(OptimizerHook):
    """The ``mup-fno`` hook: ``optimizer: {hooks: [{name: mup-fno, args: {base_modes: 4}}]}``.

    Args:
        base_modes: the proxy's kept modes, an int ``K0`` per spatial dim (``N0 = K0^d`` with ``d``
            the dims of each weight) or one int per dim (``N0 = prod``). Required.
        allow_non_adam: run with an optimizer other than Adam/AdamW (outside the paper's scope).
        grad_clip: element-wise clip value for spectral-weight gradients (``None``: off).
        scale_init: multiply the spectral weights by ``c`` when the model is built (turn off when
            the weights are already μP-scaled, e.g. fine-tuning a model trained with this hook).
        spatial_dims: the model's spatial dims for layers that need them (default:
            ``model.config.spatial_dims``).
    """

    def __init__(self, base_modes: int | Sequence[int] | None = None, grad_clip: float | None = None,
                 scale_init: bool = True, spatial_dims: int | None = None, allow_non_adam: bool = False):
        if base_modes is None:
            raise opzoo.ConfigError(f"{HOOK_NAME}: base_modes is required: the Fourier modes per dim of the base "
                                    "(proxy) model, e.g. args: {base_modes: 4}")
        if isinstance(base_modes, bool) or not isinstance(base_modes, (int, list, tuple)) or (
                isinstance(base_modes, (list, tuple)) and not all(isinstance(k, int) and k >= 1 for k in base_modes)):
            raise opzoo.ConfigError(f"{HOOK_NAME}: base_modes: expected an int or a list of ints >= 1, got {base_modes!r}")
        if isinstance(base_modes, int) and base_modes < 1:
            raise opzoo.ConfigError(f"{HOOK_NAME}: base_modes: must be >= 1, got {base_modes}")
        if grad_clip is not None and (isinstance(grad_clip, bool) or not (isinstance(grad_clip, (int, float)) and grad_clip > 0)):
            raise opzoo.ConfigError(f"{HOOK_NAME}: grad_clip: expected a positive number or null, got {grad_clip!r}")
        if not isinstance(allow_non_adam, bool):
            raise opzoo.ConfigError(f"{HOOK_NAME}: allow_non_adam: expected true or false, got {allow_non_adam!r}")
        self.allow_non_adam = allow_non_adam
        self._optimizer_checked = False
        self.base_modes = base_modes if isinstance(base_modes, int) else tuple(base_modes)
        self.grad_clip = None if grad_clip is None else float(grad_clip)
        self.scale_init = bool(scale_init)
        self.spatial_dims = spatial_dims
        self.factors: dict[str, float] = {}  # parameter name -> c, for the spectral weights
        self._by_id: dict[int, float] = {}
        self._spectral: list[nn.Parameter] = []

    def base_n_modes(self, dims: int) -> int:
        """``N0`` for a weight with ``dims`` mode dims."""
        if isinstance(self.base_modes, int):
            return self.base_modes ** dims
        if len(self.base_modes) != dims:
            raise opzoo.ConfigError(f"{HOOK_NAME}: base_modes: {list(self.base_modes)} has {len(self.base_modes)} "
                                    f"entries for a spectral weight with {dims} mode dims")
        return math.prod(self.base_modes)

    def _collect(self, model: nn.Module) -> None:
        weights = opzoo.find_spectral_weights(model, self.spatial_dims)
        if not weights:
            raise opzoo.ConfigError(f"{HOOK_NAME}: the model ({type(model).__name__}) has no spectral weights: no layer "
                                    "implements opzoo.SpectralLayer (spectral_weights)")
        self.factors = {w.name: mup_factor(w.n_modes, self.base_n_modes(len(w.modes))) for w in weights}
        self._by_id = {id(w.param): self.factors[w.name] for w in weights}
        self._spectral = [w.param for w in weights]

    def multipliers(self, model: nn.Module) -> dict[str, float]:
        """``{parameter name: c}`` for every trainable parameter (1 for non-spectral ones)."""
        if not self.factors:
            self._collect(model)
        return {n: self.factors.get(n, 1.0) for n, p in model.named_parameters() if p.requires_grad}

    # ---- the OptimizerHook interface ----------------------------------------------------------
    def on_model_built(self, model: nn.Module) -> None:
        self._collect(model)
        if self.scale_init:
            with torch.no_grad():
                for p in self._spectral:
                    p.mul_(self._by_id[id(p)])

    def param_groups(self, model: nn.Module, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Spectral weights move to groups of their own (one per factor) with ``lr_scale · c``."""
        if not self.factors:
            self._collect(model)
        out = []
        for g in groups:
            options = {k: v for k, v in g.items() if k not in ("params", "names")}
            by_factor: dict[float, tuple[list, list]] = {}
            for name, p in zip(g["names"], g["params"]):
                params, names = by_factor.setdefault(self._by_id.get(id(p), 1.0), ([], []))
                params.append(p)
                names.append(name)
            for factor, (params, names) in by_factor.items():
                out.append({**options, "params": params, "names": names,
                            "lr_scale": float(options.get("lr_scale", 1.0)) * factor})
        return out

    def before_optimizer_step(self, ctx: StepContext) -> None:
        if not self._optimizer_checked:  # the first step, before any update: the hook sees no optimizer earlier
            if not self.allow_non_adam and not isinstance(ctx.optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                raise non_adam_error(type(ctx.optimizer).__name__)
            self._optimizer_checked = True
        if self.grad_clip is None:
            return
        for p in self._spectral:
            if p.grad is not None:
                g = torch.view_as_real(p.grad) if p.grad.is_complex() else p.grad
                g.clamp_(-self.grad_clip, self.grad_clip)

    def state_dict(self) -> dict[str, Any]:
        return {"factors": dict(self.factors)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("factors")
        if saved is not None and self.factors and any(abs(saved.get(k, -1.0) - v) > 1e-12 for k, v in self.factors.items()):
            raise opzoo.ConfigError(f"{HOOK_NAME}: the checkpoint was trained with other μP factors ({saved}) than "
                                    f"this run's base_modes gives ({self.factors}); use the run's original base_modes")


def register_components(registry) -> None:
    registry.register_optimizer_hook(HOOK_NAME, MuPFNO)

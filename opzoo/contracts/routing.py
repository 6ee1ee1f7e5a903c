"""Routers (the Router interface and the Routing it returns) and what they did in their last forward.

A Router is built by the block or feed-forward that routes (e.g. opzoo-moe's); the functions here are
generic over any :class:`Router` inside any module, so the trainer, ``opzoo eval`` and user code can
log balance losses and see which experts take which inputs.

- ``aux_losses(model)``: ``{group: mean over the group's routers that ran of last_aux_loss}``
- ``weighted_aux_loss(model)``: ``sum_g mean_{r in g}(aux_weight_r * L_r)`` (what enters the total loss)
- ``expert_counts(model)`` / ``expert_loads(model)``: ``{router module name: [num_experts]}``
- ``ExpertLoadRecorder``: counts every routed group of every forward (forward hooks), e.g. per dataset
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor, nn


@dataclass
class Routing:
    """A router's choice for ``G`` groups (samples or tokens): ``weights [G, k]``, ``indices [G, k]``."""

    weights: Tensor
    indices: Tensor
    aux_loss: Tensor


class Router(nn.Module, metaclass=abc.ABCMeta):
    """Chooses experts: ``forward(x) -> Routing``.

    A router remembers its last forward so that the backbone and the trainer find it
    (the functions below): ``last_aux_loss`` (its balance loss, unweighted) and ``last_counts``
    (``[num_experts]``, how many of the ``G * k`` assignments went to each expert). ``aux_group``
    names the loss it belongs to (e.g. ``"image"``, ``"token"``) and ``aux_weight`` that loss's
    coefficient in the total loss: ``Backbone.aux_loss()`` is the sum over groups of the weighted
    mean over the group's routers that ran (one that ran on zero groups, as an idle expert's does under
    ``torch.compile``, counts as not run). A block whose routers may not run in a forward (those of
    an idle expert) calls ``reset()`` on them first, so no stale loss is summed.
    """

    num_experts: int = 0
    aux_group: str = "aux"
    aux_weight: float = 1.0
    last_aux_loss: Tensor | None = None
    last_counts: Tensor | None = None

    @property
    def last_load(self) -> Tensor | None:
        """Fraction of the last forward's assignments per expert, ``[num_experts]`` (sums to 1)."""
        if self.last_counts is None:
            return None
        return self.last_counts / self.last_counts.sum().clamp_min(1)

    def reset(self) -> None:
        """Forget the last forward (a router that did not run contributes nothing)."""
        self.last_aux_loss = None
        self.last_counts = None

    def __getstate__(self):
        # copies and pickles of a router do not carry its last forward (a tensor inside a graph)
        return {**super().__getstate__(), "last_aux_loss": None, "last_counts": None}

    @abc.abstractmethod
    def forward(self, x: Tensor) -> Routing: ...


def named_routers(model: nn.Module) -> Iterator[tuple[str, Router]]:
    """``(module name, router)`` for every router of ``model``, in module order."""
    for name, module in model.named_modules():
        if isinstance(module, Router):
            yield name, module


def _ran(model: nn.Module) -> dict[str, list[Router]]:
    groups: dict[str, list[Router]] = {}
    for _, router in named_routers(model):
        if router.last_aux_loss is not None:
            groups.setdefault(router.aux_group, []).append(router)
    return groups


def _mean_over_routed(rs: list[Router], weights: list[float]) -> Tensor:
    """``sum_r w_r L_r / #routers`` over the routers that routed at least one group: a router that
    ran on an empty input (an idle expert's, under ``torch.compile``, which cannot skip it) counts
    as not run. Tensor arithmetic only, so it also works on the outputs of a compiled graph."""
    losses = torch.stack([w * r.last_aux_loss for r, w in zip(rs, weights)])
    routed = torch.stack([(r.last_counts.sum() > 0) if r.last_counts is not None
                          else torch.ones((), dtype=torch.bool, device=r.last_aux_loss.device) for r in rs])
    routed = routed.to(losses.dtype)
    return (losses * routed).sum() / routed.sum().clamp_min(1)


def aux_losses(model: nn.Module) -> dict[str, Tensor]:
    """Unweighted balance loss per ``aux_group``: the mean over the group's routers that ran."""
    return {g: _mean_over_routed(rs, [1.0] * len(rs)) for g, rs in _ran(model).items()}


def weighted_aux_loss(model: nn.Module) -> Tensor | None:
    """``sum_g mean_{r in g}(aux_weight_r * L_r)``, or None when no router ran."""
    total = None
    for rs in _ran(model).values():
        term = _mean_over_routed(rs, [r.aux_weight for r in rs])
        total = term if total is None else total + term
    return total


def expert_counts(model: nn.Module) -> dict[str, Tensor]:
    """Assignments per expert of the last forward, ``{name: [num_experts]}`` (zeros for a router that did not run)."""
    out = {}
    for name, router in named_routers(model):
        c = router.last_counts
        out[name] = c.detach().float() if c is not None else torch.zeros(router.num_experts)
    return out


def expert_loads(model: nn.Module) -> dict[str, Tensor]:
    """Fraction of the last forward's assignments per expert, ``{name: [num_experts]}``."""
    return {name: c / c.sum().clamp_min(1) for name, c in expert_counts(model).items()}


def routing_counts(routing: Routing, num_experts: int) -> Tensor:
    """``[num_experts]``: how many of the ``G * k`` assignments of ``routing`` go to each expert."""
    return torch.bincount(routing.indices.reshape(-1), minlength=num_experts).float()


class ExpertLoadRecorder:
    """Sums the assignments of every router over many forwards (forward hooks); a context manager.

    ``with ExpertLoadRecorder(model) as rec: model.rollout(...)``; then ``rec.loads()`` gives
    ``{router name: [num_experts] fractions}`` over everything routed inside the block.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.counts: dict[str, Tensor] = {name: torch.zeros(r.num_experts) for name, r in named_routers(model)}
        self._handles: list = []

    def __enter__(self) -> "ExpertLoadRecorder":
        for name, router in named_routers(self.model):
            def hook(module, args, output, name=name):
                self.counts[name] += routing_counts(output, module.num_experts).cpu()
            self._handles.append(router.register_forward_hook(hook))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def loads(self) -> dict[str, list[float]]:
        return {n: (c / c.sum().clamp_min(1)).tolist() for n, c in self.counts.items()}


__all__ = ["Router", "Routing", "named_routers", "aux_losses", "weighted_aux_loss", "expert_counts", "expert_loads", "routing_counts",
           "ExpertLoadRecorder"]

"""Top-k routers (NESTOR eqs. 5-7, 12, 14): image-level (one choice per sample) and token-level.

Both compute, for ``G`` groups with features ``h [G, D]``:
``s = h W^T + b`` (float32, also under autocast), ``P = softmax(s / temperature)`` (training may add
``noise_std * randn`` to ``s`` first), the top-k experts ``I_g`` of each row and their weights
``w_{g,i} = P_{g,i} / sum_{j in I_g} P_{g,j}`` (eq. 7; ``renormalize=False`` keeps ``P_{g,i}``).

Balance loss (eq. 14): ``L = E * sum_i p_i f_i`` with ``p_i = mean_g P_{g,i}`` and
``f_i = n_i / sum_j n_j``, ``n_i`` the number of groups that chose expert ``i`` among their k. With
top-k, ``sum_j n_j = G * k``, so ``f_i`` is expert i's share of the ``G * k`` assignments; if every
expert gets the same share (``f_i = 1/E``) then ``L = sum_i p_i = 1`` whatever ``P`` is. ``f`` counts
hard choices and carries no gradient; the gradient reaches the router through ``p``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from opzoo import ConfigError, Router, Routing


def expert_counts(indices: Tensor, num_experts: int) -> Tensor:
    """``[num_experts]`` int64: how many of the assignments ``indices [G, k]`` each expert got
    (a fixed-size ``scatter_add``: unlike ``bincount`` its output shape does not depend on the data,
    so it traces under ``torch.compile``)."""
    flat = indices.reshape(-1)
    return flat.new_zeros(num_experts).scatter_add_(0, flat, torch.ones_like(flat))


def balance_loss(probs: Tensor, indices: Tensor, num_experts: int) -> tuple[Tensor, Tensor]:
    """``(E * sum_i p_i f_i, counts [E])`` for ``probs [G, E]`` and chosen ``indices [G, k]``.

    ``G = 0`` (a router given no groups, e.g. that of an idle expert under ``torch.compile``) gives
    ``(0, zeros)``, not NaN."""
    counts = expert_counts(indices, num_experts).to(probs.dtype)
    groups = torch.sym_max(probs.shape[0], 1)
    f = counts / (groups * indices.shape[1])
    return num_experts * (probs.sum(0) / groups * f).sum(), counts


class TopKRouter(Router):
    """Top-k gate over ``G`` group features ``[G, D] -> Routing(weights [G, k], indices [G, k], aux_loss)``.

    ``noise_std``: Gaussian noise on the logits in training mode only (exploration); ``temperature``
    divides the logits in training and evaluation alike (so both route the same way); ``aux_group`` and ``aux_weight`` say which loss the balance term joins and
    with what coefficient (alpha for image-level, beta for token-level in NESTOR).
    """

    def __init__(self, dim: int, num_experts: int, top_k: int = 1, noise_std: float = 0.0, temperature: float = 1.0,
                 renormalize: bool = True, aux_weight: float = 0.01, aux_group: str = "aux"):
        super().__init__()
        if num_experts < 1 or not 1 <= top_k <= num_experts:
            raise ConfigError(f"router: need 1 <= top_k <= num_experts, got top_k={top_k}, num_experts={num_experts}")
        if temperature <= 0 or noise_std < 0 or aux_weight < 0:
            raise ConfigError(f"router: temperature must be > 0, noise_std and aux_weight >= 0; got {temperature}, "
                              f"{noise_std}, {aux_weight}")
        self.num_experts, self.top_k = num_experts, top_k
        self.noise_std, self.temperature, self.renormalize = noise_std, temperature, renormalize
        self.aux_weight, self.aux_group = aux_weight, aux_group
        self.gate = nn.Linear(dim, num_experts)

    def features(self, x: Tensor) -> Tensor:
        """The group features ``[G, D]`` of the input."""
        return x.reshape(-1, x.shape[-1])

    def forward(self, x: Tensor) -> Routing:
        probs = self.probabilities(x)
        return self.route(probs, probs.topk(self.top_k, dim=-1).indices)

    def probabilities(self, x: Tensor) -> Tensor:
        """``P [G, E]`` float32 (also under autocast), with the training noise on the logits."""
        h = self.features(x)
        with torch.autocast(device_type=h.device.type, enabled=False):
            logits = F.linear(h.float(), self.gate.weight.float(), self.gate.bias.float())
            if self.training and self.noise_std > 0:
                logits = logits + self.noise_std * torch.randn_like(logits)
            return torch.softmax(logits / self.temperature, dim=-1)

    def route(self, probs: Tensor, indices: Tensor) -> Routing:
        """The routing for chosen experts ``indices [G, k]`` (the top-k of ``probs`` in :meth:`forward`):
        their (renormalized) probabilities as weights and the balance loss."""
        with torch.autocast(device_type=probs.device.type, enabled=False):
            top = probs.gather(-1, indices)                                     # [G, k]
            weights = top / top.sum(-1, keepdim=True) if self.renormalize else top
            aux, counts = balance_loss(probs, indices, self.num_experts)
        self.last_aux_loss, self.last_counts = aux, counts.detach()
        return Routing(weights, indices, aux)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, top_k={self.top_k}, group={self.aux_group!r}, "
                f"weight={self.aux_weight}, noise_std={self.noise_std}, temperature={self.temperature}")


class TokenRouter(TopKRouter):
    """Token-level routing (eq. 12): ``x [..., D]``, one group per token (``G = prod(...)``)."""

    def __init__(self, dim: int, num_experts: int, top_k: int = 2, **kwargs):
        kwargs.setdefault("aux_group", "token")
        super().__init__(dim, num_experts, top_k, **kwargs)


class ImageRouter(TopKRouter):
    """Image-level routing (eqs. 5-7): ``x [B, *S, D]``, one group per sample, features = mean over ``S``."""

    def __init__(self, dim: int, num_experts: int, top_k: int = 1, **kwargs):
        kwargs.setdefault("aux_group", "image")
        super().__init__(dim, num_experts, top_k, **kwargs)

    def features(self, x: Tensor) -> Tensor:
        return x.flatten(1, -2).mean(1)


__all__ = ["expert_counts", "balance_loss", "TopKRouter", "TokenRouter", "ImageRouter"]

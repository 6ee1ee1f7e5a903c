"""The sparse mixture-of-experts feed-forward sub-layer (registered as feed-forward ``moe``).

``y = sum_s Shared_s(x) + sum_{i in I(x)} w_i(x) * Expert_i(x)`` per token, every expert an MLP
``W2 GELU(W1 x + b1) + b2`` (NESTOR eq. 13) of hidden width ``hidden_dim`` (``int(D * mlp_ratio)``),
the routed ones chosen by a token-level top-k router (eq. 12) and run sparsely (``dispatch``).
"""

from __future__ import annotations

from torch import Tensor, nn

from opzoo import FeedForward, get_registry

from .dispatch import dispatch
from .routers import TokenRouter


class SparseMoEFeedForward(FeedForward):
    """``[B, *S, D] -> [B, *S, D]``: ``num_shared`` always-on MLP experts plus ``num_experts`` routed
    MLP experts, ``top_k`` per token (weights renormalized over the k, eq. 12).

    The router is ``self.router`` (a :class:`TokenRouter` in the ``"token"`` aux group with weight
    ``aux_weight``, the β of NESTOR's total loss); its balance loss and expert load are read by
    ``model.aux_loss()`` and ``opzoo.contracts.routing``.
    """

    def __init__(self, dim: int, hidden_dim: int, act: str = "gelu", num_experts: int = 4, top_k: int = 2,
                 num_shared: int = 1, aux_weight: float = 0.01, noise_std: float = 0.0, temperature: float = 1.0,
                 renormalize: bool = True, aux_group: str = "token"):
        super().__init__()
        mlp = get_registry().get("feedforward", "mlp")
        self.router = TokenRouter(dim, num_experts, top_k, noise_std=noise_std, temperature=temperature,
                                  renormalize=renormalize, aux_weight=aux_weight, aux_group=aux_group)
        self.experts = nn.ModuleList(mlp(dim, hidden_dim=hidden_dim, act=act) for _ in range(num_experts))
        self.shared = nn.ModuleList(mlp(dim, hidden_dim=hidden_dim, act=act) for _ in range(num_shared))

    def forward(self, x: Tensor) -> Tensor:
        tokens = x.reshape(-1, x.shape[-1])                                  # [G, D]
        y = dispatch(tokens, self.router(tokens), self.experts)
        for shared in self.shared:
            y = y + shared(tokens)
        return y.view(x.shape)


__all__ = ["SparseMoEFeedForward"]

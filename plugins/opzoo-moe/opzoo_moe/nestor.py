"""NESTOR's nested mixture-of-experts block (docs/models.md §4), registered as block layout ``nestor``.

One residual sub-layer per block, ``state -> Residual(state, branch)`` with

    branch(z) = Shared(z) + sum_{i in I_b} w_{b,i} * Expert_i(z_b)          (per sample b)
    Shared(z) = FFN(GN2(F(GN1(z)))),  F(u) = Mixer(u) + u                    (DPOT's branch, always on)
    Expert_i(z) = a + SubMoE_i(LN2(z + a)),  a = Attention_i(LN1(z))          (a pre-norm transformer
                                                                               layer minus its identity)

``I_b, w_b`` come from the image-level router on the global average pool of ``z`` (eqs. 5-7); each
``SubMoE_i`` is a :class:`SparseMoEFeedForward` with a token-level router (eq. 12) over the tokens of
the samples routed to expert i. Samples go to their experts sparsely (``dispatch``): an expert runs
only on its samples. With the plain residual the block is ``y = x + Shared(x) + sum_i w_i Expert_i(x)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.nn.functional as F
from torch import Tensor, nn

from opzoo import Block, ConfigError

from .dispatch import dispatch
from .feedforward import SparseMoEFeedForward
from .routers import ImageRouter

if TYPE_CHECKING:
    from opzoo import PotParts

class SelfAttention(nn.Module):
    """Softmax self-attention over all tokens of a sample: ``[n, *S, D] -> [n, *S, D]``
    (``qkv`` and ``proj`` linear layers, ``heads`` heads, ``F.scaled_dot_product_attention``)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise ConfigError(f"block_args.heads: width {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        n, d = x.shape[0], x.shape[-1]
        t = x.flatten(1, -2)                                                      # [n, L, D] (n may be 0)
        q, k, v = self.qkv(t).view(n, t.shape[1], 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v)                               # [n, H, L, D/H]
        return self.proj(o.transpose(1, 2).reshape(t.shape)).view(x.shape)


class AttentionExpert(nn.Module):
    """A routed expert: ``z -> a + SubMoE(LN2(z + a))`` with ``a = SelfAttention(LN1(z))``; ``[n, *S, D]``."""

    def __init__(self, dim: int, heads: int, ffn: SparseMoEFeedForward):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = ffn

    def forward(self, z: Tensor) -> Tensor:
        a = self.attn(self.norm1(z))
        return a + self.ffn(self.norm2(z + a))


class SharedExpert(nn.Module):
    """DPOT's block branch, always active: ``z -> FFN(GN2(Mixer(GN1(z)) + GN1(z)))``; ``[B, *S, D]``."""

    def __init__(self, parts: "PotParts"):
        super().__init__()
        self.norm1 = parts.make_norm()
        self.mixer = parts.make_mixer()
        self.norm2 = parts.make_norm()
        self.mlp = parts.make_feedforward()

    def forward(self, z: Tensor) -> Tensor:
        u = self.norm1(z)
        return self.mlp(self.norm2(self.mixer(u) + u))


class NestorBlock(Block):
    """NESTOR's block: shared Fourier-attention expert + ``n_experts`` attention experts (image-level
    top-``top_k``), each with a token-level Sub-MoE FFN (``sub_experts`` MLPs, top-``sub_top_k``, plus
    ``sub_shared`` shared MLPs). ``alpha``/``beta`` weight the image-/token-level balance losses;
    ``router_noise``/``router_temperature`` apply to both routers. ``heads`` defaults to ``width // 64``.
    """

    sublayers = 1

    def __init__(self, parts: "PotParts", index: int, n_experts: int = 4, top_k: int = 1, alpha: float = 0.01,
                 sub_experts: int = 4, sub_top_k: int = 2, sub_shared: int = 1, beta: float = 0.01,
                 heads: int | None = None, router_noise: float = 0.0, router_temperature: float = 1.0,
                 renormalize: bool = True):
        super().__init__()
        dim = parts.width
        heads = heads or max(1, dim // 64)
        self.shared = SharedExpert(parts)
        self.router = ImageRouter(dim, n_experts, top_k, noise_std=router_noise, temperature=router_temperature,
                                  renormalize=renormalize, aux_weight=alpha)
        self.experts = nn.ModuleList(
            AttentionExpert(dim, heads, SparseMoEFeedForward(
                dim, int(dim * parts.mlp_ratio), act=parts.act, num_experts=sub_experts, top_k=sub_top_k,
                num_shared=sub_shared, aux_weight=beta, noise_std=router_noise, temperature=router_temperature,
                renormalize=renormalize))
            for _ in range(n_experts))
        self.residual = parts.make_residual(index)

    def branch(self, z: Tensor) -> Tensor:
        for expert in self.experts:  # an idle expert's router must not report last step's loss
            expert.ffn.router.reset()
        return self.shared(z) + dispatch(z, self.router(z), self.experts)

    def forward(self, state: Any) -> Any:
        return self.residual(state, self.branch)


__all__ = ["SelfAttention", "AttentionExpert", "SharedExpert", "NestorBlock"]

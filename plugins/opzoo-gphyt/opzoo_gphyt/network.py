"""The General Physics Transformer's network in opzoo's own code, on normalized fields in upstream's layout
(docs/models.md §10).

``GPhyTNet(x: [B, T, H, W, C]) -> [B, 1, H, W, C]``: the state after one step of an explicit integrator (Euler, Heun,
RK4, or none: the network's output itself) whose time derivative is the transformer
``f(x) = detokenize(blocks(tokenize([x, d_t x, d_h x, d_w x]) + P))``, of which the last frame is kept. The
computation is FloWsnr/General-Physics-Transformer ``gphyt/model/transformer/model.py`` ``PhysicsTransformer`` at
4374116 (the commit that published the weights) with a linear tokenizer and detokenizer, no overlap, absolute
positions and full spatio-temporal attention, as its training config sets them:

- ``d_t, d_h, d_w``: central differences ``x[i+1] - x[i-1]`` along each axis, the edges replicated (no grid spacing),
  computed without gradient, as upstream's ``FiniteDifference`` is;
- tokens: a ``(p_t, p_h, p_w)`` patch convolution of the ``4C`` channels to ``d``, plus a learned ``[T', H', W', d]``
  table;
- blocks: ``y = x + A(LN(x))``, ``y + MLP(LN(y))`` (GELU), ``A`` a bias-free ``qkv`` projection followed by
  ``nn.MultiheadAttention`` over all ``T' H' W'`` tokens (its own input and output projections);
- back to fields: the transposed patch convolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

INTEGRATORS = ("Euler", "Heun", "RK4", "none")


def central_differences(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``[B, T, H, W, C]`` -> ``x[i+1] - x[i-1]`` along T, H and W, with replicated edges (no gradient)."""
    with torch.no_grad():
        out = []
        for axis in (1, 2, 3):
            n = x.shape[axis]
            nxt = torch.cat([x.narrow(axis, 1, n - 1), x.narrow(axis, n - 1, 1)], dim=axis) if n > 1 else x
            prv = torch.cat([x.narrow(axis, 0, 1), x.narrow(axis, 0, n - 1)], dim=axis) if n > 1 else x
            out.append(nxt - prv)
        return out[0], out[1], out[2]


class Attention(nn.Module):
    """``[B, N, d] -> [B, N, d]``: a bias-free ``qkv`` projection, then multi-head attention with its own projections."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attention = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        return self.attention(q, k, v, need_weights=False)[0]


class Block(nn.Module):
    """Pre-norm attention and MLP, each with a residual around it."""

    def __init__(self, dim: int, mlp_dim: int, heads: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = Attention(dim, heads, dropout)
        self.fc1, self.fc2 = nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm2(x)))))


class GPhyTNet(nn.Module):
    """The time derivative network and its integrator: ``[B, T, H, W, C] -> [B, 1, H, W, C]``."""

    def __init__(self, *, fields: int, dim: int, mlp_dim: int, heads: int, layers: int, patch: tuple[int, int, int],
                 tokens: tuple[int, int, int], use_derivatives: bool, integrator: str, dropout: float = 0.0):
        super().__init__()
        self.use_derivatives, self.integrator, self.patch = use_derivatives, integrator, tuple(patch)
        channels = 4 * fields if use_derivatives else fields
        self.tokenize = nn.Conv3d(channels, dim, kernel_size=self.patch, stride=self.patch)
        self.pos_embed = nn.Parameter(torch.randn(1, *tokens, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, mlp_dim, heads, dropout) for _ in range(layers))
        self.detokenize = nn.ConvTranspose3d(dim, fields, kernel_size=self.patch, stride=self.patch)

    def tokens(self, x: Tensor) -> Tensor:
        """``[B, T, H, W, C] -> [B, T', H', W', d]``: the derivative channels, the patches, the position table."""
        if self.use_derivatives:
            x = torch.cat([x, *central_differences(x)], dim=-1)
        return self.tokenize(x.permute(0, 4, 1, 2, 3)).permute(0, 2, 3, 4, 1) + self.pos_embed

    def blocks_out(self, h: Tensor, checkpointed=None) -> Tensor:
        shape = h.shape
        h = h.reshape(shape[0], -1, shape[-1])
        for block in self.blocks:
            h = block(h) if checkpointed is None else checkpointed(block, h)
        return h.reshape(shape)

    def fields(self, h: Tensor) -> Tensor:
        """``[B, T', H', W', d] -> [B, T, H, W, C]``."""
        return self.detokenize(h.permute(0, 4, 1, 2, 3)).permute(0, 2, 3, 4, 1)

    def derivative(self, x: Tensor, checkpointed=None) -> Tensor:
        """The network's time derivative ``f(x)``, every frame: ``[B, T, H, W, C]``."""
        return self.fields(self.blocks_out(self.tokens(x), checkpointed))

    def step(self, x: Tensor, k1: Tensor, step_size: float = 1.0, checkpointed=None) -> Tensor:
        """One integrator step from ``x`` given its derivative ``k1 = f(x)`` (later stages evaluate ``f`` again):
        ``[B, T, H, W, C]``, every frame."""
        f = lambda y: self.derivative(y, checkpointed)  # noqa: E731
        if self.integrator == "Euler":
            return x + step_size * k1
        if self.integrator == "Heun":
            return x + step_size * (0.5 * (k1 + f(x + step_size * k1)))
        if self.integrator == "RK4":
            k2 = f(x + 0.5 * step_size * k1)
            k3 = f(x + 0.5 * step_size * k2)
            k4 = f(x + step_size * k3)
            return x + step_size * (1 / 6 * (k1 + 2 * k2 + 2 * k3 + k4))
        return k1

    def forward(self, x: Tensor, step_size: float = 1.0, checkpointed=None) -> Tensor:
        return self.step(x, self.derivative(x, checkpointed), step_size, checkpointed)[:, -1:]


def parameter_count(*, fields: int, dim: int, mlp_dim: int, layers: int, patch, tokens, use_derivatives: bool,
                    **_) -> int:
    """GPhyTNet's parameter count from its sizes (no tensor is built)."""
    volume = patch[0] * patch[1] * patch[2]
    channels = 4 * fields if use_derivatives else fields
    block = 4 * dim + 3 * dim * dim + (3 * dim * dim + 3 * dim) + (dim * dim + dim) + 2 * mlp_dim * dim + mlp_dim + dim
    return (channels * volume * dim + dim + tokens[0] * tokens[1] * tokens[2] * dim + layers * block
            + dim * fields * volume + fields)

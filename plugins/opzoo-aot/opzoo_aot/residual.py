"""The AOT residual (AOT-POT's adaptive operator-transformation block), DESIGN §6.3.

The residual state is ``n`` streams ``X [B, n, *S, D]``. Each sub-layer aggregates the streams into
the branch input with ``h_pre``, redistributes the branch output with ``h_post`` and mixes the
streams with the doubly stochastic ``H_res``; all three are computed from the input by a pooled,
RMS-normalized summary of the streams.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import opzoo
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .sinkhorn import CompileMode, autocast_off, sinkhorn_knopp_eager, use_compiled
from .stream_ops import aggregate_streams, mix_streams, pool_streams

__all__ = ["AOTResidual", "AOTStreams", "AOT_ARGS", "check_aot_args"]

# residual_args understood by the AOT residual, with their defaults (the paper's n=4, 20 iterations, α=0.01)
AOT_ARGS: dict[str, Any] = dict(
    n=4, sinkhorn_iters=20, alpha=0.01, res_bias=4.0, pre_bias=4.0, eps=1e-6, compile="auto"
)


def check_aot_args(args: dict[str, Any]) -> dict[str, Any]:
    """``residual_args`` with defaults filled in; a clear ConfigError for unknown or invalid values."""
    unknown = sorted(set(args) - set(AOT_ARGS))
    if unknown:
        raise opzoo.ConfigError(
            f"residual_args: unknown field(s) {', '.join(map(repr, unknown))} for the 'aot' residual; "
            f"known fields: {', '.join(AOT_ARGS)}"
        )
    a = {**AOT_ARGS, **args}
    for key in ("n", "sinkhorn_iters"):
        if isinstance(a[key], bool) or not isinstance(a[key], int) or a[key] < 1:
            raise opzoo.ConfigError(f"residual_args.{key}: expected an integer >= 1, got {a[key]!r}")
    for key in ("alpha", "res_bias", "pre_bias", "eps"):
        if isinstance(a[key], bool) or not isinstance(a[key], (int, float)):
            raise opzoo.ConfigError(f"residual_args.{key}: expected a number, got {a[key]!r}")
    if a["eps"] <= 0:
        raise opzoo.ConfigError(f"residual_args.eps: expected a positive number, got {a['eps']!r}")
    if a["compile"] not in (True, False, "auto"):
        raise opzoo.ConfigError(f"residual_args.compile: expected true, false or 'auto', got {a['compile']!r}")
    return a


def stream_coefficients(
    pooled: Tensor, phi_pre: Tensor, phi_post: Tensor, phi_res: Tensor, b_pre: Tensor, b_post: Tensor,
    b_res: Tensor, alpha_pre: Tensor, alpha_post: Tensor, alpha_res: Tensor, eps: float, iters: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """DESIGN §6.3 from the pooled streams ``[B, n, D]`` (float32) to ``h_pre [B, n], h_post [B, n], H_res [B, n, n]``."""
    n = pooled.shape[1]
    z = F.rms_norm(pooled.flatten(1), (pooled.shape[1] * pooled.shape[2],), eps=eps)  # [B, nD], no affine
    proj = z @ torch.cat([phi_pre, phi_post, phi_res], dim=1)  # [B, 2n + n²]
    gate = torch.sigmoid(alpha_pre * proj[:, :n] + b_pre)
    h_pre = gate / gate.sum(dim=1, keepdim=True)  # on the simplex
    h_post = 2.0 * torch.sigmoid(alpha_post * proj[:, n:2 * n] + b_post)
    H_res = sinkhorn_knopp_eager(alpha_res * proj[:, 2 * n:].unflatten(1, (n, n)) + b_res, iters)
    return h_pre, h_post, H_res


@functools.lru_cache(maxsize=None)
def compiled_coefficients():
    """:func:`stream_coefficients` fused by torch.compile (the CUDA default): a handful of kernels
    instead of ~100 tiny launches for the projections and the 20 Sinkhorn iterations."""
    return torch.compile(stream_coefficients, fullgraph=True, dynamic=True)


def _check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise opzoo.ConfigError(f"AOT residual: width dim must be an integer >= 1, got {dim!r}")
    return dim


class AOTStreams(opzoo.StreamAdapter):
    """``expand(x [B, *S, D]) -> [B, n, *S, D]`` (n copies); ``collapse(X) -> Σ_i softmax(g)_i X[:, i]``."""

    def __init__(self, dim: int, n: int = 4):
        super().__init__()
        self.dim, self.n = _check_dim(dim), n
        self.g = nn.Parameter(torch.zeros(n))  # zero init: uniform readout

    def expand(self, x: Tensor) -> Tensor:
        if x.ndim < 3 or x.shape[-1] != self.dim:
            raise ValueError(f"AOTStreams.expand expects [B, *S, {self.dim}], got {list(x.shape)}")
        return x.unsqueeze(1).expand(x.shape[0], self.n, *x.shape[1:]).contiguous()

    def collapse(self, state: Tensor) -> Tensor:
        _check_state(state, self.n, self.dim, "AOTStreams.collapse")
        weights = torch.softmax(self.g.float(), dim=0).to(state.dtype)
        return torch.matmul(weights, state.reshape(state.shape[0], self.n, -1)).view(
            state.shape[:1] + state.shape[2:]
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n={self.n}"


def _check_state(state: Tensor, n: int, dim: int, where: str) -> None:
    if state.ndim < 4 or state.shape[1] != n or state.shape[-1] != dim:
        raise ValueError(
            f"{where} expects the stream state [B, {n}, *S, {dim}] (made by the 'aot' stream adapter's "
            f"expand), got {list(state.shape)}"
        )


class AOTResidual(opzoo.Residual):
    """One sub-layer's AOT connection: ``forward(X [B, n, *S, D], branch) -> X' [B, n, *S, D]``.

    ``X'[:, i] = Σ_j H_res[i, j] X[:, j] + h_post[i] · branch(Σ_i h_pre[i] X[:, i])``.
    Constructed as ``AOTResidual(dim, index=k, **residual_args)`` (keys in :data:`AOT_ARGS`).
    """

    def __init__(
        self,
        dim: int,
        index: int = 0,
        n: int = 4,
        sinkhorn_iters: int = 20,
        alpha: float = 0.01,
        res_bias: float = 4.0,
        pre_bias: float = 4.0,
        eps: float = 1e-6,
        compile: CompileMode = "auto",
    ):
        super().__init__()
        check_aot_args(dict(n=n, sinkhorn_iters=sinkhorn_iters, alpha=alpha, res_bias=res_bias,
                            pre_bias=pre_bias, eps=eps, compile=compile))
        self.dim, self.index, self.n = _check_dim(dim), index, n
        self.sinkhorn_iters, self.eps, self.compile = sinkhorn_iters, float(eps), compile
        nd = n * dim
        self.phi_pre = nn.Parameter(torch.zeros(nd, n))
        self.phi_post = nn.Parameter(torch.zeros(nd, n))
        self.phi_res = nn.Parameter(torch.zeros(nd, n * n))
        # a preferred stream per sub-layer breaks the permutation symmetry of the streams (DESIGN §6.3)
        b_pre = torch.full((n,), -float(pre_bias))
        b_pre[index % n] = float(pre_bias)
        self.b_pre = nn.Parameter(b_pre)
        self.b_post = nn.Parameter(torch.zeros(n))
        self.b_res = nn.Parameter(float(res_bias) * torch.eye(n))
        self.alpha_pre = nn.Parameter(torch.tensor(float(alpha)))
        self.alpha_post = nn.Parameter(torch.tensor(float(alpha)))
        self.alpha_res = nn.Parameter(torch.tensor(float(alpha)))

    @classmethod
    def stream_adapter(cls, dim: int, **residual_args) -> AOTStreams:
        return AOTStreams(dim, n=check_aot_args(residual_args)["n"])

    def coefficients(self, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``X [B, n, *S, D] -> h_pre [B, n], h_post [B, n], H_res [B, n, n]``, all float32."""
        _check_state(state, self.n, self.dim, f"AOTResidual (sub-layer {self.index})")
        return self._coefficients(state.reshape(state.shape[0], self.n, -1))

    def _coefficients(self, streams: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        with autocast_off(streams.device):
            pooled = pool_streams(streams, self.dim)  # [B, n, D] float32
            fn = compiled_coefficients() if use_compiled(self.compile, streams.device) else stream_coefficients
            return fn(pooled, *(p.float() for p in self._coefficient_parameters()), self.eps, self.sinkhorn_iters)

    def _coefficient_parameters(self) -> tuple[Tensor, ...]:
        return (self.phi_pre, self.phi_post, self.phi_res, self.b_pre, self.b_post, self.b_res,
                self.alpha_pre, self.alpha_post, self.alpha_res)

    def forward(self, state: Tensor, branch: Callable[[Tensor], Tensor]) -> Tensor:
        _check_state(state, self.n, self.dim, f"AOTResidual (sub-layer {self.index})")
        batch, dtype = state.shape[0], state.dtype
        streams = state.reshape(batch, self.n, -1)  # [B, n, S·D]; all three stream ops share this view
        h_pre, h_post, H_res = self._coefficients(streams)
        with autocast_off(state.device):
            u = aggregate_streams(streams, h_pre.to(dtype)).view(state.shape[:1] + state.shape[2:])
        y = branch(u)
        if y.shape != u.shape:
            raise ValueError(
                f"AOTResidual (sub-layer {self.index}): the branch must map {list(u.shape)} to the same "
                f"shape, got {list(y.shape)}"
            )
        with autocast_off(state.device):
            out = mix_streams(streams, H_res.to(dtype), h_post.to(dtype), y.reshape(batch, -1).to(dtype))
        return out.view(state.shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, index={self.index}, n={self.n}, sinkhorn_iters={self.sinkhorn_iters}"

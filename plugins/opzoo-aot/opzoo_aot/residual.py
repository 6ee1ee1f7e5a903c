"""The AOT residual (AOT-POT's adaptive operator-transformation block), DESIGN §6.3.

The residual state is ``n`` streams ``X [B, n, *S, D]``. Each sub-layer aggregates the streams into
the branch input with ``h_pre``, redistributes the branch output with ``h_post`` and mixes the
streams with the doubly stochastic ``H_res``; all three are computed from the input by a pooled,
RMS-normalized summary of the streams.

Between sub-layers the network carries an :class:`AOTState`: the streams with the last sub-layer's
update still pending, and their pooled summary. Applying the update and aggregating for the next
branch is then one pass over the streams (``u' = h_pre'·(H X + h_post y) = (H^T h_pre')·X + (h_pre'·h_post) y``),
and the summary follows from the update by linearity (``mean_S(X') = H mean_S(X) + h_post mean_S(y)``),
so no sub-layer reads the streams just to pool them. The result is the same function as applying
each update at once; a plain ``[B, n, *S, D]`` tensor is accepted and returned too.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Union

import opzoo
import torch
from torch import Tensor, nn

from .coefficients import coefficients_cpu, coefficients_torch, compiled_coefficients
from .sinkhorn import CompileMode, autocast_off, use_compiled
from .stream_ops import (carry_mean, carry_pooled, combine_streams, combine_streams_torch, expand_streams,
                         pending_update, pool_streams)
from .sublayer import fused_sublayer

__all__ = ["AOTResidual", "AOTStreams", "AOTState", "AOT_ARGS", "check_aot_args"]

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


def _check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise opzoo.ConfigError(f"AOT residual: width dim must be an integer >= 1, got {dim!r}")
    return dim


@dataclasses.dataclass(eq=False)  # tensors do not compare to a bool
class AOTState:
    """The AOT residual state between sub-layers (DESIGN §6.3), made by :meth:`AOTStreams.expand`.

    ``streams [B, n, *S, D]`` with an update pending when ``y`` is set: the current streams are
    ``X[:, i] = Σ_j H_res[:, i, j] streams[:, j] + h_post[:, i] · y`` (``y [B, *S, D]``,
    ``H_res [B, n, n]``, ``h_post [B, n]``). ``pooled [B, n, D]`` (float32) is the spatial mean of
    ``streams``. A registered pytree, so FSDP and ``torch.compile`` see its tensors.
    """

    streams: Tensor
    pooled: Tensor
    y: Tensor | None = None
    H_res: Tensor | None = None
    h_post: Tensor | None = None

    def materialize(self) -> Tensor:
        """The current streams ``[B, n, *S, D]`` (differentiable)."""
        if self.y is None:
            return self.streams
        b, n = self.streams.shape[:2]
        with autocast_off(self.streams.device):
            current, _ = combine_streams(self.streams.reshape(b, n, -1), self.y.reshape(b, -1).to(self.streams.dtype),
                                         self.H_res.to(self.streams.dtype), self.h_post.to(self.streams.dtype))
        return current.view(self.streams.shape)

    def current_pooled(self) -> Tensor:
        """``[B, n, D]`` float32: the spatial mean of the current streams (by linearity, no pass over them)."""
        if self.y is None:
            return self.pooled
        b, d = self.y.shape[0], self.pooled.shape[-1]
        with autocast_off(self.pooled.device):
            return carry_pooled(self.y.reshape(b, -1, d), self.H_res.float(), self.h_post.float(), self.pooled)

    @property
    def shape(self) -> torch.Size:
        """The shape of the current streams, ``[B, n, *S, D]``."""
        return self.streams.shape


torch.export.register_dataclass(AOTState, serialized_type_name="opzoo_aot.AOTState")

State = Union[AOTState, Tensor]


class AOTStreams(opzoo.StreamAdapter):
    """``expand(x [B, *S, D]) -> AOTState`` (n copies); ``collapse(state) -> Σ_i softmax(g)_i X[:, i]``."""

    def __init__(self, dim: int, n: int = 4):
        super().__init__()
        self.dim, self.n = _check_dim(dim), n
        self.g = nn.Parameter(torch.zeros(n))  # zero init: uniform readout

    def expand(self, x: Tensor) -> AOTState:
        if x.ndim < 3 or x.shape[-1] != self.dim:
            raise ValueError(f"AOTStreams.expand expects [B, *S, {self.dim}], got {list(x.shape)}")
        with autocast_off(x.device):
            streams = expand_streams(x.reshape(x.shape[0], -1), self.n).view(x.shape[0], self.n, *x.shape[1:])
            pooled = x.reshape(x.shape[0], -1, self.dim).mean(dim=1, dtype=torch.float32)
        return AOTState(streams, pooled.unsqueeze(1).expand(x.shape[0], self.n, self.dim))

    def collapse(self, state: State) -> Tensor:
        streams = _check_state(state, self.n, self.dim, "AOTStreams.collapse")
        b, dtype = streams.shape[0], streams.dtype
        with autocast_off(streams.device):
            weights = torch.softmax(self.g.float(), dim=0).to(dtype).expand(b, self.n)  # [B, n]
            pending = isinstance(state, AOTState) and state.y is not None
            if pending:  # Σ_i w_i (H X + h_post y)_i, without forming H X + h_post y
                _, out = combine_streams(streams.reshape(b, self.n, -1), state.y.reshape(b, -1).to(dtype),
                                         state.H_res.to(dtype), state.h_post.to(dtype), weights, need_current=False)
            else:
                _, out = combine_streams(streams.reshape(b, self.n, -1), h=weights)
        return out.view(streams.shape[:1] + streams.shape[2:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n={self.n}"


def _check_state(state: State, n: int, dim: int, where: str) -> Tensor:
    """The stream tensor of ``state`` (an AOTState or a ``[B, n, *S, D]`` tensor), checked."""
    streams = state.streams if isinstance(state, AOTState) else state
    if not isinstance(streams, Tensor) or streams.ndim < 4 or streams.shape[1] != n or streams.shape[-1] != dim:
        got = list(streams.shape) if isinstance(streams, Tensor) else type(state).__name__
        raise ValueError(
            f"{where} expects the stream state [B, {n}, *S, {dim}] (made by the 'aot' stream adapter's "
            f"expand), got {got}"
        )
    return streams


class AOTResidual(opzoo.Residual):
    """One sub-layer's AOT connection: ``forward(X [B, n, *S, D], branch) -> X' [B, n, *S, D]``.

    ``X'[:, i] = Σ_j H_res[i, j] X[:, j] + h_post[i] · branch(Σ_i h_pre[i] X[:, i])``.
    ``X`` is an :class:`AOTState` (returned as one, with the update pending) or a plain tensor.
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
        # the gate scalars are stored as [1] tensors: FSDP2 cannot shard 0-dim parameters
        self.alpha_pre = nn.Parameter(torch.full((1,), float(alpha)))
        self.alpha_post = nn.Parameter(torch.full((1,), float(alpha)))
        self.alpha_res = nn.Parameter(torch.full((1,), float(alpha)))

    @classmethod
    def stream_adapter(cls, dim: int, **residual_args) -> AOTStreams:
        return AOTStreams(dim, n=check_aot_args(residual_args)["n"])

    def coefficients(self, state: State) -> tuple[Tensor, Tensor, Tensor]:
        """``X -> h_pre [B, n], h_post [B, n], H_res [B, n, n]``, all float32."""
        streams = _check_state(state, self.n, self.dim, f"AOTResidual (sub-layer {self.index})")
        with autocast_off(streams.device):
            if isinstance(state, AOTState):
                return self._coefficients(state.current_pooled())
            return self._coefficients(pool_streams(streams.reshape(streams.shape[0], self.n, -1), self.dim))

    def _coefficients(self, pooled: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``pooled [B, n, D]`` float32 -> the coefficients (see :mod:`opzoo_aot.coefficients`)."""
        params = self._float_parameters()
        if use_compiled(self.compile, pooled.device):
            return compiled_coefficients()(pooled, *params, self.eps, self.sinkhorn_iters)
        fast = coefficients_cpu(pooled, *params, eps=self.eps, iters=self.sinkhorn_iters)
        if fast is not None:
            return fast
        return coefficients_torch(pooled, *params, eps=self.eps, iters=self.sinkhorn_iters)

    def _coefficient_parameters(self) -> tuple[Tensor, ...]:
        return (self.phi_pre, self.phi_post, self.phi_res, self.b_pre, self.b_post, self.b_res,
                self.alpha_pre, self.alpha_post, self.alpha_res)

    def _float_parameters(self) -> list[Tensor]:
        """The coefficient parameters in float32 (the coefficients are float32 under any autocast)."""
        return [p.float() for p in self._coefficient_parameters()]

    def _combine(self, *args):
        if use_compiled(self.compile, args[0].device):
            return _compiled_combine()(*args)
        return combine_streams(*args)

    def forward(self, state: State, branch: Callable[[Tensor], Tensor]) -> State:
        streams = _check_state(state, self.n, self.dim, f"AOTResidual (sub-layer {self.index})")
        if not isinstance(state, AOTState):
            return self._forward_tensor(streams, branch)
        shape, dtype, b = streams.shape, streams.dtype, streams.shape[0]
        pending = state.y is not None
        with autocast_off(streams.device):
            flat = streams.reshape(b, self.n, -1)
            fused = None
            if not use_compiled(self.compile, streams.device):
                y_prev = state.y.reshape(b, -1).to(dtype) if pending else None
                fused = fused_sublayer(flat, y_prev, state.H_res, state.h_post, state.pooled,
                                       self._float_parameters(), self.eps, self.sinkhorn_iters)
            current, u, h_post, H_res, pooled = fused if fused is not None else self._before_branch(state, flat)
        y = self._branch(branch, u.view(shape[:1] + shape[2:]))
        return AOTState(current.view(shape), pooled, y, H_res, h_post)

    def _before_branch(self, state: AOTState, flat: Tensor) -> tuple[Tensor, ...]:
        """What :func:`fused_sublayer` computes, in PyTorch ops: ``flat [B, n, F]`` (the state's
        streams) -> ``(current, u, h_post, H_res, current_pooled)``."""
        dtype = flat.dtype
        if state.y is None:
            pooled, y_prev, H_prev, h_post_prev = state.pooled, None, None, None
        else:
            # one node for both uses of y (the stream map's row and the carried summary)
            y_prev, y_mean = pending_update(state.y.reshape(flat.shape[0], -1, self.dim), dtype, state.pooled.dtype)
            pooled = carry_mean(y_mean, state.H_res.float(), state.h_post.float(), state.pooled)
            H_prev, h_post_prev = state.H_res.to(dtype), state.h_post.to(dtype)
        h_pre, h_post, H_res = self._coefficients(pooled)
        current, u = self._combine(flat, y_prev, H_prev, h_post_prev, h_pre.to(dtype))
        return current, u, h_post, H_res, pooled

    def _branch(self, branch: Callable[[Tensor], Tensor], u: Tensor) -> Tensor:
        y = branch(u)
        if y.shape != u.shape:
            raise ValueError(
                f"AOTResidual (sub-layer {self.index}): the branch must map {list(u.shape)} to the same "
                f"shape, got {list(y.shape)}"
            )
        return y.contiguous()  # once here rather than in every pass over it

    def _forward_tensor(self, streams: Tensor, branch: Callable[[Tensor], Tensor]) -> Tensor:
        """The residual on a plain ``[B, n, *S, D]`` tensor: pool, aggregate, branch, update."""
        shape, dtype, b = streams.shape, streams.dtype, streams.shape[0]
        h_pre, h_post, H_res = self.coefficients(streams)
        with autocast_off(streams.device):
            flat = streams.reshape(b, self.n, -1)
            _, u = self._combine(flat, None, None, None, h_pre.to(dtype), False)
        y = self._branch(branch, u.view(shape[:1] + shape[2:]))
        with autocast_off(streams.device):
            out, _ = self._combine(flat, y.reshape(b, -1).to(dtype), H_res.to(dtype), h_post.to(dtype), None)
        return out.view(shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, index={self.index}, n={self.n}, sinkhorn_iters={self.sinkhorn_iters}"


@functools.lru_cache(maxsize=None)
def _compiled_combine():
    """:func:`combine_streams_torch` fused by torch.compile (with the coefficients, the CUDA default)."""
    return torch.compile(combine_streams_torch, dynamic=True)

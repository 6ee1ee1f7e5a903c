"""The AOT residual (registered as residual ``aot``) and its stream adapter, docs/models.md §3.

The residual state is an :class:`AOTState`: the streams ``X [B, n, *S, D]`` and their mean over
the positions. :class:`AOTStreams` makes it (``n`` copies of the latent) and reads it out; each
sub-layer's :class:`AOTResidual` computes its coefficients from the mean and applies
``X' = H_res X + h_post ⊗ branch(Σ_i h_pre[i] X[:, i])`` (:mod:`opzoo_aot.equations`). The mean of
``X'`` follows from the same update applied to the means (``mean_S`` is linear), so no sub-layer
reads the streams just to pool them (a pass forward and two backward: ~20 % of the residual's time
on CPU). The coefficients and the stream maps run outside autocast: the coefficients (and
Sinkhorn) in float64 where the device has it (CPU, CUDA; float32 elsewhere: they are a few numbers
per sample, and float64 halves to tenths the gradients' errors, docs/accuracy.md), the maps in the
streams' dtype.

``compile`` (a residual argument): ``True`` runs the equations through ``torch.compile``
(``fullgraph``), ``"auto"`` (the default) does so on CUDA only, ``False`` never; the compiled and
the eager path are the same functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Literal, NamedTuple, Union

import torch
from torch import Tensor, nn

import opzoo

from . import equations

__all__ = ["AOTResidual", "AOTResidualArgs", "AOTStreams", "AOTState", "AOT_ARGS", "check_aot_args"]

CompileMode = Union[bool, Literal["auto"]]

@dataclasses.dataclass
class AOTResidualArgs:
    """The ``residual_args`` of the AOT residual, with their defaults (the paper's n=4, 20 Sinkhorn iterations,
    α=0.01); opzoo checks a config's ``residual_args`` against it where the config is built."""

    n: int = 4
    sinkhorn_iters: int = 20
    alpha: float = 0.01
    res_bias: float = 4.0
    pre_bias: float = 4.0
    eps: float = 1e-6
    compile: Union[bool, Literal["auto"]] = "auto"

    def check(self, where: str = "residual_args") -> None:
        for key in ("n", "sinkhorn_iters"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise opzoo.ConfigError(f"{where}.{key}: expected an integer >= 1, got {value!r}")
        for key in ("alpha", "res_bias", "pre_bias", "eps"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise opzoo.ConfigError(f"{where}.{key}: expected a number, got {value!r}")
        if self.eps <= 0:
            raise opzoo.ConfigError(f"{where}.eps: expected a positive number, got {self.eps!r}")
        if self.compile not in (True, False, "auto"):
            raise opzoo.ConfigError(f"{where}.compile: expected true, false or 'auto', got {self.compile!r}")


# the defaults, as a dict (derived from AOTResidualArgs: one place says them)
AOT_ARGS: dict[str, Any] = dataclasses.asdict(AOTResidualArgs())


def check_aot_args(args: dict[str, Any]) -> dict[str, Any]:
    """``residual_args`` with defaults filled in; a ConfigError naming an unknown or invalid key."""
    built = opzoo.build_dataclass(AOTResidualArgs, args, "residual_args")
    built.check()
    return dataclasses.asdict(built)


def _check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise opzoo.ConfigError(f"AOT residual: width dim must be an integer >= 1, got {dim!r}")
    return dim


class AOTState(NamedTuple):
    """The residual state between sub-layers: ``streams [B, n, *S, D]`` and ``pooled [B, n, D]``,
    their mean over the positions (float32 at least). A tuple, so FSDP and torch.compile see its tensors."""

    streams: Tensor
    pooled: Tensor

    @classmethod
    def of(cls, streams: Tensor) -> "AOTState":
        """The state of given streams ``[B, n, *S, D]`` (their mean computed)."""
        return cls(streams, equations.pool(streams))


def _check_state(state: Any, n: int, dim: int, where: str) -> AOTState:
    X = state.streams if isinstance(state, AOTState) else state
    if not isinstance(state, AOTState) or X.ndim < 4 or X.shape[1] != n or X.shape[-1] != dim:
        got = list(X.shape) if isinstance(X, Tensor) else type(X).__name__
        raise ValueError(f"{where} expects an AOTState with streams [B, {n}, *S, {dim}] (made by the 'aot' "
                         f"stream adapter's expand, or AOTState.of(streams)), got {type(state).__name__} {got}")
    return state


def autocast_off(device: torch.device):
    """A context that disables autocast on ``device`` (a no-op where autocast is off or absent)."""
    if torch.amp.is_autocast_available(device.type) and torch.is_autocast_enabled(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def use_compile(mode: CompileMode, device: torch.device) -> bool:
    """Whether ``mode`` runs the equations through torch.compile on ``device`` (``auto``: CUDA only).
    Inside a region that is being compiled already they are traced as they are."""
    if torch.compiler.is_compiling():
        return False
    return device.type == "cuda" if mode == "auto" else bool(mode)


class AOTStreams(opzoo.StreamAdapter):
    """``expand(x [B, *S, D]) -> AOTState`` (n copies of x); ``collapse(state) -> Σ_i softmax(g)_i X[:, i]``."""

    def __init__(self, dim: int, n: int = 4):
        super().__init__()
        self.dim, self.n = _check_dim(dim), n
        self.g = nn.Parameter(torch.zeros(n))  # zero init: uniform readout

    def expand(self, x: Tensor) -> AOTState:
        if x.ndim < 3 or x.shape[-1] != self.dim:
            raise ValueError(f"AOTStreams.expand expects [B, *S, {self.dim}], got {list(x.shape)}")
        pooled = equations.pool(x.unsqueeze(1)).expand(x.shape[0], self.n, self.dim)
        return AOTState(x.unsqueeze(1).expand(x.shape[0], self.n, *x.shape[1:]), pooled)

    def collapse(self, state: AOTState) -> Tensor:
        X = _check_state(state, self.n, self.dim, "AOTStreams.collapse").streams
        with autocast_off(X.device):
            weights = torch.softmax(self.g.float(), dim=0).to(X.dtype).expand(X.shape[0], self.n)
            return equations.aggregate(weights, X)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n={self.n}"


def _before_branch(state: AOTState, *params_eps_iters) -> tuple[Tensor, Tensor, Tensor]:
    """``state -> (u [B, *S, D], h_post [B, n], H_res [B, n, n])``: a sub-layer's work before its branch."""
    X, pooled = state
    h_pre, h_post, H_res = equations.coefficients(pooled, *params_eps_iters)
    return equations.aggregate(h_pre.to(X.dtype), X), h_post, H_res


def _after_branch(state: AOTState, H_res: Tensor, h_post: Tensor, y: Tensor) -> AOTState:
    """The updated streams, and their mean by the same update of the means."""
    X, pooled = state
    streams = equations.update(X, H_res.to(X.dtype), h_post.to(X.dtype), y.to(X.dtype))
    pooled = equations.update(pooled, H_res.to(pooled.dtype), h_post.to(pooled.dtype),
                              equations.pool(y.unsqueeze(1)).squeeze(1))
    return AOTState(streams, pooled)


@functools.lru_cache(maxsize=None)
def _compiled(fn: Callable) -> Callable:
    return torch.compile(fn, fullgraph=True)


class AOTResidual(opzoo.Residual):
    """One sub-layer's AOT connection: ``forward(state, branch) -> state`` (:class:`AOTState`), with
    ``X'[:, i] = Σ_j H_res[i, j] X[:, j] + h_post[i] · branch(Σ_i h_pre[i] X[:, i])``.
    Constructed as ``AOTResidual(dim, index=k, **residual_args)`` (the fields of :class:`AOTResidualArgs`).
    """

    args_class = AOTResidualArgs

    def __init__(self, dim: int, index: int = 0, **residual_args: Any):
        super().__init__()
        a = check_aot_args(residual_args)
        n, sinkhorn_iters, alpha, eps, compile = a["n"], a["sinkhorn_iters"], a["alpha"], a["eps"], a["compile"]
        res_bias, pre_bias = a["res_bias"], a["pre_bias"]
        self.dim, self.index, self.n = _check_dim(dim), index, n
        self.sinkhorn_iters, self.eps, self.compile = sinkhorn_iters, float(eps), compile
        self.phi_pre = nn.Parameter(torch.zeros(n * dim, n))
        self.phi_post = nn.Parameter(torch.zeros(n * dim, n))
        self.phi_res = nn.Parameter(torch.zeros(n * dim, n * n))
        # a preferred stream per sub-layer breaks the permutation symmetry of the streams (docs/models.md §3)
        b_pre = torch.full((n,), -float(pre_bias))
        b_pre[index % n] = float(pre_bias)
        self.b_pre = nn.Parameter(b_pre)
        self.b_post = nn.Parameter(torch.zeros(n))  # h_post = 2σ(0) = 1
        self.b_res = nn.Parameter(float(res_bias) * torch.eye(n))  # H_res ≈ 0.95·I for res_bias 4
        # the gate scalars are stored as [1] tensors: FSDP2 cannot shard 0-dim parameters
        self.alpha_pre = nn.Parameter(torch.full((1,), float(alpha)))
        self.alpha_post = nn.Parameter(torch.full((1,), float(alpha)))
        self.alpha_res = nn.Parameter(torch.full((1,), float(alpha)))

    @classmethod
    def stream_adapter(cls, dim: int, **residual_args) -> AOTStreams:
        return AOTStreams(dim, n=check_aot_args(residual_args)["n"])

    def _params_eps_iters(self) -> tuple:
        """The coefficient parameters in the coefficients' dtype, then eps and the Sinkhorn iterations."""
        params = (self.phi_pre, self.phi_post, self.phi_res, self.b_pre, self.b_post, self.b_res,
                  self.alpha_pre, self.alpha_post, self.alpha_res)
        dtype = torch.float64 if self.phi_pre.device.type in ("cpu", "cuda", "meta") else torch.float32
        return (*(p.to(dtype) for p in params), self.eps, self.sinkhorn_iters)

    def coefficients(self, state: AOTState) -> tuple[Tensor, Tensor, Tensor]:
        """``state -> h_pre [B, n], h_post [B, n], H_res [B, n, n]`` (float64 on CPU and CUDA)."""
        state = _check_state(state, self.n, self.dim, f"AOTResidual (sub-layer {self.index})")
        with autocast_off(state.pooled.device):
            return equations.coefficients(state.pooled, *self._params_eps_iters())

    def forward(self, state: AOTState, branch: Callable[[Tensor], Tensor]) -> AOTState:
        state = _check_state(state, self.n, self.dim, f"AOTResidual (sub-layer {self.index})")
        X = state.streams
        before, after = _before_branch, _after_branch
        if use_compile(self.compile, X.device):
            before, after = _compiled(_before_branch), _compiled(_after_branch)
        with autocast_off(X.device):
            u, h_post, H_res = before(state, *self._params_eps_iters())
        y = branch(u)
        if y.shape != u.shape:
            raise ValueError(f"AOTResidual (sub-layer {self.index}): the branch must map {list(u.shape)} to the "
                             f"same shape, got {list(y.shape)}")
        with autocast_off(X.device):
            return after(state, H_res, h_post, y)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, index={self.index}, n={self.n}, sinkhorn_iters={self.sinkhorn_iters}"

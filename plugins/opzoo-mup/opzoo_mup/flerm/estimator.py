"""Estimators of a layer's function-space learning rate ``‖Δ_ℓ f‖_RMS`` (FLeRM, Milsom et al. 2025).

For a probe ``φ = Σ_nk ω_nk f_nk / sqrt(NK)`` with ``ω ~ N(0, 1)`` and the "lr = 1" update ``ΔW``,
``Z = ΔW ⊙ ∂φ/∂W`` (Eq. 8) is zero-mean Gaussian and ``‖Δ_ℓ f‖²_RMS = Var[Σ Z] = Σ Cov[Z, Z]`` (Eq. 9).

- :class:`KroneckerEMA`: Kronecker-factored covariance over the ``D`` dims of ``Z`` (App. B, Eq. 28):
  ``‖Δf‖² ≈ Π_d E[Z.sum(d).square().sum()] / E[Z.square().sum()]^(D−1)``, expectations as EMAs
  (Algorithm 1: ``EMA <- (1 − β) EMA + β new``, bias-corrected), the quotient in log space.
  Complex tensors are viewed as real with the real/imaginary pair as one more dim (``Δφ = Σ Re ΔW·Re g + Im ΔW·Im g``); that dim is either summed
  exactly (``complex_dim="sum"``, default: ``Z = Re(conj(ΔW)·g)`` per entry, Kronecker over the D
  tensor dims) or factored like the others (``"factor"``, D + 1 dims). A Kronecker covariance over
  D + 1 dims implies one over D dims after the sum, so "sum" assumes strictly less; on the small FNO
  of the tests its expectation is 0.90-0.99 of the exact value on the spectral weights, against
  0.75-0.89 for "factor" (benchmarks/bench_flerm_estimator.py, docs/flerm.md).
  The readout rules of App. D: rows of the last layer's weight are independent (Eq. 32,
  ``E[Σ_i (Σ_j Z_ij)²]``), and so are the entries of its bias (Eq. 34, ``E[Σ_i Z_i²]``).
- :class:`MonteCarloEstimate`: the unbiased "no assumption" estimator ``mean((Σ Z)²)`` with its
  standard error (Sec. 3.1), the reference.
- :func:`exact_function_space_lr`: brute force from the gradient of every output (Eqs. 1-2).
- :func:`finite_difference_fslr`: the truth without linearization: the RMS change of the outputs when
  only tensor ℓ takes the update just made, divided by its lr (tests and benchmarks).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import torch
from torch import Tensor

KRONECKER, READOUT_WEIGHT, READOUT_BIAS = "kronecker", "readout-weight", "readout-bias"
RULES = (KRONECKER, READOUT_WEIGHT, READOUT_BIAS)


def real_view(t: Tensor) -> Tensor:
    """A real tensor of at least one dim: complex ``[*s]`` -> ``[*s, 2]`` (real, imaginary); scalars -> ``[1]``."""
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    return t.reshape(1) if t.ndim == 0 else t


COMPLEX_DIMS = ("sum", "factor")


def z_sample(delta: Tensor, grad: Tensor, complex_dim: str = "sum") -> Tensor:
    """``Z = ΔW ⊙ ∂φ/∂W`` in float64; ``Σ Z = Δφ`` (first order). Complex tensors: real view with the
    (real, imaginary) pair as a last dim, summed (``"sum"``: ``Re(conj(ΔW)·g)``) or kept (``"factor"``)."""
    if complex_dim not in COMPLEX_DIMS:
        raise ValueError(f"complex_dim must be one of {COMPLEX_DIMS}, got {complex_dim!r}")
    z = real_view(delta).double() * real_view(grad).double()
    if delta.is_complex() and complex_dim == "sum":
        z = z.sum(-1)
    return z


def z_statistics(z: Tensor, rule: str = KRONECKER) -> Tensor:
    """The scalars whose expectations the estimator needs, ``[D+1]`` (Kronecker) or ``[1]`` (readout).

    Kronecker: ``[Z.sum(0).square().sum(), …, Z.sum(D−1).square().sum(), Z.square().sum()]``.
    Readout weight: ``[Σ_i (Σ_{j…} Z_ij…)²]`` (rows = dim 0 = output features). Readout bias: ``[Σ_i Z_i²]``.
    """
    z = real_view(z).double()
    if rule == KRONECKER:
        return torch.stack([z.sum(d).square().sum() for d in range(z.ndim)] + [z.square().sum()])
    if rule == READOUT_WEIGHT:
        return z.reshape(z.shape[0], -1).sum(1).square().sum().reshape(1)
    if rule == READOUT_BIAS:
        return z.square().sum().reshape(1)
    raise ValueError(f"unknown estimator rule {rule!r}; expected one of {RULES}")


def fslr_from_statistics(stats: Tensor, rule: str = KRONECKER) -> float:
    """``‖Δ_ℓ f‖_RMS`` from the expectations of :func:`z_statistics` (log space; 0 when any is 0)."""
    s = [float(v) for v in stats]
    if any(v <= 0.0 for v in s):
        return 0.0
    if rule == KRONECKER:
        *num, den = s
        log_sq = sum(math.log(v) for v in num) - (len(num) - 1) * math.log(den)
    else:
        log_sq = math.log(s[0])
    return math.exp(0.5 * log_sq)


class KroneckerEMA:
    """Bias-corrected EMAs of one tensor's :func:`z_statistics`, in Algorithm 1's form
    ``EMA <- (1 − β)·EMA + β·new`` (``beta`` is the weight of the newest sample; 1: the newest alone).

    A sample is either one probe's ``Z`` (:meth:`update`) or the mean statistics of several probes of
    the same update (:meth:`update_statistics`, one measurement).
    """

    def __init__(self, rule: str = KRONECKER, beta: float = 1.0):
        if rule not in RULES:
            raise ValueError(f"unknown estimator rule {rule!r}; expected one of {RULES}")
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"beta (the weight of the newest sample) must be in (0, 1], got {beta}")
        self.rule, self.beta = rule, beta
        self.ema: Tensor | None = None
        self.count = 0

    def update(self, z: Tensor) -> None:
        self.update_statistics(z_statistics(z, self.rule))

    def update_statistics(self, s: Tensor) -> None:
        s = s.detach().double().cpu()
        self.ema = self.beta * s if self.ema is None else (1 - self.beta) * self.ema + self.beta * s
        self.count += 1

    def expectations(self) -> Tensor:
        if self.ema is None:
            raise RuntimeError("KroneckerEMA: no sample yet")
        return self.ema / (1 - (1 - self.beta) ** self.count)

    def value(self) -> float:
        """The current ``‖Δ_ℓ f‖_RMS`` estimate."""
        return fslr_from_statistics(self.expectations(), self.rule)

    def state(self) -> tuple[Tensor, int]:
        return (self.ema if self.ema is not None else torch.zeros(0, dtype=torch.float64)), self.count

    def load(self, ema: Tensor, count: int) -> None:
        self.ema, self.count = (ema.double().clone() if ema.numel() else None), int(count)


class MonteCarloEstimate:
    """Unbiased ``‖Δ_ℓ f‖²_RMS = E[(Σ Z)²]`` from independent samples, with its standard error."""

    def __init__(self):
        self.samples: list[float] = []

    def update(self, z: Tensor) -> None:
        self.samples.append(float(real_view(z).double().sum()) ** 2)

    @property
    def squared(self) -> float:
        return sum(self.samples) / len(self.samples)

    @property
    def squared_stderr(self) -> float:
        n = len(self.samples)
        if n < 2:
            return math.inf
        m = self.squared
        return math.sqrt(sum((s - m) ** 2 for s in self.samples) / (n - 1) / n)

    def value(self) -> float:
        """``‖Δ_ℓ f‖_RMS`` (square root of the mean)."""
        return math.sqrt(self.squared)

    def stderr(self) -> float:
        """Standard error of :meth:`value` (delta method: ``se(x²) / 2x``)."""
        v = self.value()
        return math.inf if v == 0 else self.squared_stderr / (2 * v)


def exact_function_space_lr(fn: Callable[[], Tensor], params: Mapping[str, Tensor], deltas: Mapping[str, Tensor],
                            weights: Tensor | None = None) -> dict[str, float]:
    """``‖Δ_ℓ f‖_RMS`` per tensor, brute force: ``Δ_ℓ f_o = Σ ΔW ⊙ ∂f_o/∂W`` for every output ``o`` (Eqs. 1-2).

    ``fn()`` returns the outputs ``f`` (any shape; differentiable in ``params``); ``weights`` (the
    shape of ``f``, 0/1) restricts the RMS to the outputs that count (padded channels excluded).
    One backward per output: for tests and small models only.
    """
    f = fn()
    flat = f.reshape(-1)
    keep = torch.ones_like(flat, dtype=torch.bool) if weights is None else weights.expand_as(f).reshape(-1) > 0
    names = list(params)
    sq = {n: 0.0 for n in names}
    kept = 0
    for o in range(flat.numel()):
        if not keep[o]:
            continue
        kept += 1
        grads = torch.autograd.grad(flat[o], [params[n] for n in names], retain_graph=True, allow_unused=True)
        for n, g in zip(names, grads):
            if g is not None:
                sq[n] += float(z_sample(deltas[n], g).sum()) ** 2
    return {n: math.sqrt(v / max(kept, 1)) for n, v in sq.items()}


@torch.no_grad()
def finite_difference_fslr(fn: Callable[[], Tensor], params: Mapping[str, Tensor], before: Mapping[str, Tensor],
                           lrs: Mapping[str, float]) -> dict[str, float]:
    """``RMS(f(W_before + ΔW_ℓ) − f(W_before)) / lr_ℓ`` per tensor, ``ΔW_ℓ = W_ℓ − W_ℓ^before``.

    ``params`` hold the updated values (restored on return); ``fn()`` evaluates the outputs on a fixed
    sample pool. The lr = 1 function-space lr of the update, to first order in ``ΔW``.
    """
    after = {n: p.detach().clone() for n, p in params.items()}
    try:
        for n, p in params.items():
            p.copy_(before[n])
        f0 = fn()
        out = {}
        for n, p in params.items():
            p.copy_(after[n])
            out[n] = float((fn() - f0).double().square().mean().sqrt()) / lrs[n]
            p.copy_(before[n])
        return out
    finally:
        for n, p in params.items():
            p.copy_(after[n])

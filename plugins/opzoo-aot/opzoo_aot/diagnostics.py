"""Diagnostics of a network's AOT residuals: per sub-layer ``h_pre, h_post, H_res`` and Amax gains.

Amax gain magnitudes (AOT-POT App. C.14, after Xie et al. 2025, mHC): for a residual mapping
matrix ``M``, the forward signal gain is the maximum absolute row sum ``max_i Σ_j |M_ij|`` and the
backward gradient gain the maximum absolute column sum ``max_j Σ_i |M_ij|``. The composite
mapping from sub-layer ``l`` to the last sub-layer ``L-1`` is ``H_{L-1} · … · H_{l+1} · H_l``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import Tensor, nn

from .residual import AOTResidual

__all__ = [
    "SubLayerCoefficients", "Gains", "AOTDiagnostics", "amax_gains", "composite_products",
    "aot_residuals", "collect_diagnostics", "plot_amax_gains",
]


def amax_gains(matrices: Tensor) -> tuple[Tensor, Tensor]:
    """``[..., n, n] -> (forward [...], backward [...])``: max absolute row sum, max absolute column sum."""
    absolute = matrices.abs()
    return absolute.sum(dim=-1).amax(dim=-1), absolute.sum(dim=-2).amax(dim=-1)


def composite_products(matrices: Tensor) -> Tensor:
    """``H [L, ..., n, n] -> P [L, ..., n, n]`` with ``P[l] = H[L-1] @ … @ H[l]`` (``P[L-1] = H[L-1]``)."""
    products = [matrices[-1]]
    for l in range(matrices.shape[0] - 2, -1, -1):
        products.append(products[-1] @ matrices[l])
    return torch.stack(products[::-1])


@dataclasses.dataclass
class SubLayerCoefficients:
    """One sub-layer's coefficients for a batch: ``h_pre [B, n]``, ``h_post [B, n]``, ``H_res [B, n, n]``."""

    index: int
    name: str
    h_pre: Tensor
    h_post: Tensor
    H_res: Tensor


@dataclasses.dataclass
class Gains:
    """Amax gains per sub-layer and sample: ``forward [L, B]``, ``backward [L, B]``."""

    forward: Tensor
    backward: Tensor


@dataclasses.dataclass
class AOTDiagnostics:
    """The coefficients of every AOT sub-layer of a network for one batch, in sub-layer order."""

    layers: list[SubLayerCoefficients]

    @property
    def H_res(self) -> Tensor:
        """``[L, B, n, n]``."""
        return torch.stack([layer.H_res for layer in self.layers])

    @property
    def h_pre(self) -> Tensor:
        """``[L, B, n]``."""
        return torch.stack([layer.h_pre for layer in self.layers])

    @property
    def h_post(self) -> Tensor:
        """``[L, B, n]``."""
        return torch.stack([layer.h_post for layer in self.layers])

    def single_gains(self) -> Gains:
        """Amax gains of each sub-layer's own ``H_res``."""
        return Gains(*amax_gains(self.H_res))

    def composite_gains(self) -> Gains:
        """Amax gains of ``H_{L-1} · … · H_l`` for every starting sub-layer ``l``."""
        return Gains(*amax_gains(composite_products(self.H_res.double()).float()))

    def probe_features(self) -> Tensor:
        """``[B, L·n·n]``: the flattened ``H_res`` of all sub-layers (the paper's interpretability probe)."""
        return self.H_res.transpose(0, 1).flatten(1)


def aot_residuals(model: nn.Module) -> list[tuple[str, AOTResidual]]:
    """The AOT residuals of ``model`` with their module names, ordered by sub-layer index."""
    found = [(name, m) for name, m in model.named_modules() if isinstance(m, AOTResidual)]
    return sorted(found, key=lambda item: item[1].index)


@torch.no_grad()
def collect_diagnostics(model: nn.Module, *inputs, **kwargs) -> AOTDiagnostics:
    """Run ``model(*inputs, **kwargs)`` once and record every AOT sub-layer's coefficients.

    The recording hooks re-evaluate each residual's ``coefficients`` on the state it receives,
    so the values are the ones the forward used. Raises ValueError if the model has no AOT residual.
    """
    residuals = aot_residuals(model)
    if not residuals:
        raise ValueError(f"{type(model).__name__} has no AOT residual (build it with residual='aot')")
    records: dict[int, SubLayerCoefficients] = {}

    def hook_for(name: str):
        def record(module: AOTResidual, args) -> None:
            h_pre, h_post, H_res = module.coefficients(args[0])
            records[id(module)] = SubLayerCoefficients(module.index, name, h_pre, h_post, H_res)

        return record

    handles = [m.register_forward_pre_hook(hook_for(name)) for name, m in residuals]
    try:
        model(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    missing = [name for name, m in residuals if id(m) not in records]
    if missing:
        raise ValueError(f"the forward did not run these AOT residuals: {', '.join(missing)}")
    return AOTDiagnostics([records[id(m)] for _, m in residuals])


def plot_amax_gains(diagnostics: AOTDiagnostics, path: str | Path, title: str = "") -> Path:
    """A PNG like AOT-POT Fig. 18: single (top) and composite (bottom) Amax gains, batch maximum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from opzoo.evaluation import save_figure

    single, composite = diagnostics.single_gains(), diagnostics.composite_gains()
    layers = range(len(diagnostics.layers))
    fig, axes = plt.subplots(2, 1, figsize=(6, 6), sharex=True)
    for ax, gains, label in ((axes[0], single, "single H_res"), (axes[1], composite, "composite ∏ H_res from l")):
        ax.plot(layers, gains.forward.amax(dim=1).cpu(), "o-", label="forward gain (max |row sum|)")
        ax.plot(layers, gains.backward.amax(dim=1).cpu(), "s--", label="backward gain (max |column sum|)")
        ax.set_ylabel("Amax gain")
        ax.set_title(label)
        ax.legend()
    axes[1].set_xlabel("sub-layer l")
    if title:
        fig.suptitle(title)
    return save_figure(plt, fig, path, dpi=100)

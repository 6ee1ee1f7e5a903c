"""Time stepping shared by the pseudo-spectral generators (Navier–Stokes, Burgers)."""

from __future__ import annotations

import math
from typing import Callable

import torch

# Spalart, Moser & Rogers (1991), J. Comput. Phys. 96: low-storage RK3 for the explicit terms,
# Crank–Nicolson-type (trapezoidal split alpha_k + beta_k) for the linear stiff term.
_ALPHA = (29 / 96, -3 / 40, 1 / 6)
_BETA = (37 / 160, 5 / 24, 1 / 6)
_GAMMA = (8 / 15, 5 / 12, 3 / 4)
_ZETA = (0.0, -17 / 60, -5 / 12)

#: Imaginary-axis stability limit of the explicit RK3 part, |lambda dt| <= sqrt(3).
RK3_IMAGINARY_LIMIT = math.sqrt(3.0)


def imex_rk3_cn_step(
    state: torch.Tensor,
    dt: float,
    linear: torch.Tensor,
    nonlinear: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Advance ``d state/dt = linear * state + nonlinear(state)`` by ``dt`` (spectral space).

    ``linear`` is the diagonal of the stiff linear operator (e.g. ``-nu |k|^2``), broadcastable to
    ``state``; it is treated implicitly (Crank–Nicolson per sub-step), ``nonlinear`` explicitly.
    Second order overall; exact-to-O(dt^3) per step for pure linear decay.
    """
    previous = None
    for a, b, g, z in zip(_ALPHA, _BETA, _GAMMA, _ZETA):
        current = nonlinear(state)
        rhs = (1 + a * dt * linear) * state + (g * dt) * current
        if previous is not None:
            rhs = rhs + (z * dt) * previous
        state = rhs / (1 - b * dt * linear)
        previous = current
    return state


def substeps(interval: float, dt_max: float) -> tuple[int, float]:
    """Split ``interval`` into equal steps no longer than ``dt_max``: ``(count, dt)``."""
    count = max(1, math.ceil(interval / dt_max - 1e-9))
    return count, interval / count

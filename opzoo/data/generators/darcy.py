"""2-D Darcy flow, the FNO Darcy set (not time-dependent).

    -div(a grad u) = 1 on (0, 1)^2,   u = 0 on the boundary,
    a = 12 where psi >= 0 and 3 where psi < 0,   psi ~ N(0, (-Laplacian + 9 I)^(-2)).

Node grid of ``res`` points per axis including the boundary (FNO: 421, subsampled to 85, 141,
211). Five-point finite differences with face coefficients the arithmetic mean of the two nodes;
the SPD system is solved by batched Jacobi-preconditioned conjugate gradients in torch (CPU or
GPU) to a relative residual of ``rtol`` (1e-12). FNO draws psi in a cosine basis; here it is a
periodic GRF, so the two agree in law away from the boundary.

Storage: one frame per sample, the coefficient and the solution as channels:
``[B, res, res, T=1, C=2]`` with fields ``a, u``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from opzoo.data.errors import GeneratorError
from opzoo.data.generators.base import PDEGenerator
from opzoo.data.generators.grf import gaussian_random_field


class Darcy2D(PDEGenerator):
    kind = "darcy"
    version = "1"
    pde = "darcy"
    fields = ("a", "u")

    def __init__(
        self,
        res: int = 64,
        a_high: float = 12.0,
        a_low: float = 3.0,
        alpha: float = 2.0,
        tau: float = 3.0,
        forcing: float = 1.0,
        rtol: float = 1e-12,
        max_iter: int | None = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__(device, dtype)
        if res < 3:
            raise ValueError(f"res must be >= 3 (boundary nodes included), got {res}")
        self.res = int(res)
        self.a_high, self.a_low = float(a_high), float(a_low)
        self.alpha, self.tau, self.forcing = float(alpha), float(tau), float(forcing)
        self.rtol = float(rtol)
        self.max_iter = int(max_iter or 20 * res * res)
        self.h = 1.0 / (self.res - 1)

    @property
    def times(self) -> np.ndarray:
        return np.zeros(1)

    @property
    def coords(self) -> dict[str, np.ndarray]:
        x = np.linspace(0.0, 1.0, self.res)
        return {"x": x, "y": x}

    def params(self) -> dict[str, Any]:
        return dict(
            a_high=self.a_high, a_low=self.a_low, grf_alpha=self.alpha, grf_tau=self.tau,
            forcing=self.forcing, domain=[[0, 1], [0, 1]], boundary="dirichlet u = 0", res=self.res,
            rtol=self.rtol, scheme="5-point finite differences, arithmetic face means, Jacobi-PCG",
            storage="one frame; channels a, u",
        )

    def sample_input(self, generator: torch.Generator) -> torch.Tensor:
        """Coefficient field ``a`` ``[res, res]``."""
        psi = gaussian_random_field((self.res, self.res), self.alpha, self.tau, generator=generator)[0]
        return torch.where(psi >= 0, self.a_high, self.a_low).to(torch.float64)

    # -- the discrete operator on interior nodes ----------------------------------------------
    def face_coefficients(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``a`` ``[B, n, n]`` -> x-faces ``[B, n-1, n-2]`` and y-faces ``[B, n-2, n-1]`` (interior rows/cols)."""
        ax = 0.5 * (a[:, 1:, 1:-1] + a[:, :-1, 1:-1])
        ay = 0.5 * (a[:, 1:-1, 1:] + a[:, 1:-1, :-1])
        return ax, ay

    def apply_operator(self, ax: torch.Tensor, ay: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``A u`` for interior values ``u`` ``[B, n-2, n-2]`` (zero Dirichlet boundary)."""
        padded = torch.nn.functional.pad(u, (1, 1, 1, 1))
        flux_x = ax * (padded[:, 1:, 1:-1] - padded[:, :-1, 1:-1])  # [B, n-1, n-2]
        flux_y = ay * (padded[:, 1:-1, 1:] - padded[:, 1:-1, :-1])  # [B, n-2, n-1]
        return -((flux_x[:, 1:] - flux_x[:, :-1]) + (flux_y[:, :, 1:] - flux_y[:, :, :-1])) / self.h**2

    def solve_pressure(self, a: torch.Tensor) -> torch.Tensor:
        """``a`` ``[B, n, n]`` -> ``u`` ``[B, n, n]`` (boundary zeros included)."""
        a = a.to(self.device, self.dtype)
        ax, ay = self.face_coefficients(a)
        diagonal = (ax[:, 1:] + ax[:, :-1] + ay[:, :, 1:] + ay[:, :, :-1]) / self.h**2
        b = torch.full_like(diagonal, self.forcing)
        u = torch.zeros_like(b)
        r = b.clone()
        z = r / diagonal
        p = z.clone()
        rz = (r * z).sum(dim=(1, 2))
        b_norm = b.flatten(1).norm(dim=1)
        for _ in range(self.max_iter):
            if bool((r.flatten(1).norm(dim=1) <= self.rtol * b_norm).all()):
                break
            ap = self.apply_operator(ax, ay, p)
            step = (rz / (p * ap).sum(dim=(1, 2))).view(-1, 1, 1)
            u = u + step * p
            r = r - step * ap
            z = r / diagonal
            rz_new = (r * z).sum(dim=(1, 2))
            p = z + (rz_new / rz).view(-1, 1, 1) * p
            rz = rz_new
        else:
            residual = (r.flatten(1).norm(dim=1) / b_norm).max()
            raise GeneratorError(
                f"darcy: CG did not reach rtol {self.rtol} in {self.max_iter} iterations "
                f"(residual {float(residual):.2e})"
            )
        return torch.nn.functional.pad(u, (1, 1, 1, 1))

    def solve(self, a: torch.Tensor) -> torch.Tensor:
        """``a`` ``[B, res, res]`` -> ``[B, res, res, 1, 2]`` (channels a, u)."""
        a = a.to(self.device, self.dtype)
        u = self.solve_pressure(a)
        return torch.stack([a, u], dim=-1)[:, :, :, None, :]

"""2-D incompressible Navier–Stokes in vorticity form on the unit torus (the FNO datasets).

    dw/dt + u . grad w = nu Laplacian w + f,   u = (d psi/dy, -d psi/dx),   -Laplacian psi = w,
    f(x, y) = 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y)),   w0 ~ GRF(alpha = 2.5, tau = 7).

Pseudo-spectral with the 2/3 rule, viscous term Crank–Nicolson and advection + forcing by RK3
(:func:`imex_rk3_cn_step`), step size from a CFL condition, re-evaluated every recorded frame.
FNO's own solver uses forward Euler with dt = 1e-4 at 256^2; this scheme is second order and
stable at far larger steps, so the data are close to, not bit-equal with, FNO's.

Defaults follow FNO: output 64 x 64, frames every 1 time unit at t = 1..T with T = 50 for
nu = 1e-3, 30 for nu = 1e-4 and 20 for nu = 1e-5 (``include_initial`` adds t = 0). Solving on a
finer grid (``solver_res``, a multiple of ``res``) and subsampling is what FNO did (256 -> 64).
Output: ``[B, res, res, T, 1]``, field ``vorticity``, axes ``x, y`` ('ij' indexing).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from opzoo.data.generators.base import PDEGenerator
from opzoo.data.generators.grf import dealias_mask, gaussian_random_field, wavenumbers
from opzoo.data.generators.timestepping import RK3_IMAGINARY_LIMIT, imex_rk3_cn_step, substeps

#: FNO's trajectory lengths by viscosity.
FNO_STEPS = {1e-3: 50, 1e-4: 30, 1e-5: 20}


class NavierStokes2D(PDEGenerator):
    kind = "ns"
    version = "1"
    pde = "navier-stokes-vorticity"
    fields = ("vorticity",)

    def __init__(
        self,
        res: int = 64,
        nu: float = 1e-3,
        steps: int | None = None,
        record_dt: float = 1.0,
        include_initial: bool = False,
        solver_res: int | None = None,
        forcing: str = "fno",
        alpha: float = 2.5,
        tau: float = 7.0,
        cfl: float = 0.5,
        dt_max: float = 5e-2,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__(device, dtype)
        self._set_resolution(res, solver_res)
        if forcing not in ("fno", "none"):
            raise ValueError(f"forcing must be 'fno' or 'none', got {forcing!r}")
        self.nu = float(nu)
        self.steps = int(steps if steps is not None else FNO_STEPS.get(self.nu, 50))
        self.record_dt = float(record_dt)
        self.include_initial = include_initial
        self.forcing = forcing
        self.alpha, self.tau = float(alpha), float(tau)
        self.cfl, self.dt_max = float(cfl), float(dt_max)

        n = self.solver_res
        kx, ky = wavenumbers((n, n), rfft=True, dtype=dtype)
        self._kx, self._ky = kx.to(self.device), ky.to(self.device)
        self._k2 = self._kx**2 + self._ky**2
        self._k2_safe = torch.where(self._k2 == 0, torch.ones_like(self._k2), self._k2)
        self._dealias = dealias_mask((n, n), dtype).to(self.device)
        x = torch.arange(n, dtype=dtype, device=self.device) / n
        xx, yy = torch.meshgrid(x, x, indexing="ij")
        f = 0.1 * (torch.sin(2 * math.pi * (xx + yy)) + torch.cos(2 * math.pi * (xx + yy)))
        self._f_hat = torch.fft.rfft2(f if forcing == "fno" else torch.zeros_like(f))

    # -- metadata -----------------------------------------------------------------------------
    @property
    def times(self) -> np.ndarray:
        first = 0 if self.include_initial else 1
        return self.record_dt * np.arange(first, self.steps + 1, dtype=np.float64)

    @property
    def coords(self) -> dict[str, np.ndarray]:
        x = np.arange(self.res) / self.res
        return {"x": x, "y": x}

    def params(self) -> dict[str, Any]:
        return dict(
            nu=self.nu, domain=[[0, 1], [0, 1]], boundary="periodic", forcing=self.forcing,
            grf_alpha=self.alpha, grf_tau=self.tau, res=self.res, solver_res=self.solver_res,
            record_dt=self.record_dt, steps=self.steps, include_initial=self.include_initial,
            cfl=self.cfl, dt_max=self.dt_max, scheme="pseudo-spectral, 2/3 dealiasing, RK3 + Crank-Nicolson",
        )

    # -- solving ------------------------------------------------------------------------------
    def sample_input(self, generator: torch.Generator) -> torch.Tensor:
        n = self.solver_res
        return gaussian_random_field((n, n), self.alpha, self.tau, generator=generator)[0]

    def velocity(self, w_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Velocity ``(u, v)`` in physical space from the vorticity's rfft2 ``[B, n, n/2+1]``."""
        psi_hat = w_hat / self._k2_safe
        n = self.solver_res
        u = torch.fft.irfft2(1j * self._ky * psi_hat, s=(n, n))
        v = torch.fft.irfft2(-1j * self._kx * psi_hat, s=(n, n))
        return u, v

    def _tendency(self, w_hat: torch.Tensor) -> torch.Tensor:
        """Explicit part ``-u . grad w + f`` in spectral space, dealiased."""
        n = self.solver_res
        psi_hat = w_hat / self._k2_safe
        # u = psi_y, v = -psi_x, w_x, w_y: one batched inverse FFT
        spectra = torch.stack(
            [self._ky * psi_hat, -self._kx * psi_hat, self._kx * w_hat, self._ky * w_hat]
        )
        u, v, wx, wy = torch.fft.irfft2(1j * spectra, s=(n, n))
        return -self._dealias * torch.fft.rfft2(u * wx + v * wy) + self._f_hat

    def _stable_dt(self, w_hat: torch.Tensor) -> float:
        u, v = self.velocity(w_hat)
        speed = float((u.abs() + v.abs()).max())
        kmax = 2 * math.pi * ((self.solver_res - 1) // 3)
        # RK3 is stable for |k u dt| <= sqrt(3); cfl < 1 leaves a margin for growth within a frame.
        limit = self.cfl * RK3_IMAGINARY_LIMIT / (kmax * speed) if speed > 0 else math.inf
        return min(self.dt_max, limit)

    def solve(self, w0: torch.Tensor) -> torch.Tensor:
        """``w0`` ``[B, n, n]`` (n = solver_res) -> ``[B, res, res, T, 1]``."""
        stride = self.solver_res // self.res
        linear = -self.nu * self._k2
        w_hat = torch.fft.rfft2(w0.to(self.device, self.dtype)) * self._dealias
        frames = []
        if self.include_initial:
            frames.append(torch.fft.irfft2(w_hat, s=w0.shape[-2:]))
        for _ in range(self.steps):
            count, dt = substeps(self.record_dt, self._stable_dt(w_hat))
            for _ in range(count):
                w_hat = imex_rk3_cn_step(w_hat, dt, linear, self._tendency)
            frames.append(torch.fft.irfft2(w_hat, s=w0.shape[-2:]))
        w = torch.stack(frames, dim=-1)[:, ::stride, ::stride]
        return w[..., None]

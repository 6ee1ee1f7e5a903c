"""1-D viscous Burgers on the periodic unit interval (the FNO / muTransfer-FNO Burgers set).

    du/dt + d(u^2 / 2)/dx = nu d^2u/dx^2,   x in [0, 1) periodic,   nu = 0.1,
    u0 ~ N(0, 625 (-Laplacian + 25 I)^(-2))   (GRF alpha = 2, tau = 5, sigma = 25).

Pseudo-spectral with the 2/3 rule; viscous term Crank–Nicolson, flux RK3
(:func:`imex_rk3_cn_step`). The operator-learning task is ``u0 -> u(., 1)``; by default frames are
recorded at t = 0, 0.1, ..., 1 (``steps`` = 10 intervals, ``include_initial``), so the file also
serves next-frame training. Output ``[B, res, T, 1]``, field ``u``; default ``res`` 1024
(FNO solved at 8192 and subsampled; use ``solver_res`` for that).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from opzoo.data.generators.base import PDEGenerator
from opzoo.data.generators.grf import dealias_mask, gaussian_random_field, wavenumbers
from opzoo.data.generators.timestepping import RK3_IMAGINARY_LIMIT, imex_rk3_cn_step, substeps


class Burgers1D(PDEGenerator):
    kind = "burgers"
    version = "1"
    pde = "burgers"
    fields = ("u",)
    spatial_ndim = 1

    def __init__(
        self,
        res: int = 1024,
        nu: float = 0.1,
        steps: int = 10,
        t_end: float = 1.0,
        include_initial: bool = True,
        solver_res: int | None = None,
        alpha: float = 2.0,
        tau: float = 5.0,
        sigma: float = 25.0,
        cfl: float = 0.5,
        dt_max: float = 1e-2,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__(device, dtype)
        self._set_resolution(res, solver_res)
        self.nu = float(nu)
        self.steps, self.t_end, self.include_initial = int(steps), float(t_end), include_initial
        self.alpha, self.tau, self.sigma = float(alpha), float(tau), float(sigma)
        self.cfl, self.dt_max = float(cfl), float(dt_max)
        (k,) = wavenumbers((self.solver_res,), rfft=True, dtype=dtype)
        self._k = k.to(self.device)
        self._kmax = 2 * math.pi * ((self.solver_res - 1) // 3)
        self._dealias = dealias_mask((self.solver_res,), dtype).to(self.device)

    @property
    def coords(self) -> dict[str, np.ndarray]:
        return {"x": np.arange(self.res) / self.res}

    def params(self) -> dict[str, Any]:
        return dict(
            nu=self.nu, domain=[0, 1], boundary="periodic", grf_alpha=self.alpha, grf_tau=self.tau,
            grf_sigma=self.sigma, res=self.res, solver_res=self.solver_res, steps=self.steps,
            t_end=self.t_end, include_initial=self.include_initial, cfl=self.cfl, dt_max=self.dt_max,
            scheme="pseudo-spectral, 2/3 dealiasing, RK3 + Crank-Nicolson",
        )

    def sample_input(self, generator: torch.Generator) -> torch.Tensor:
        return gaussian_random_field((self.solver_res,), self.alpha, self.tau, self.sigma, generator=generator)[0]

    def _tendency(self, u_hat: torch.Tensor) -> torch.Tensor:
        u = torch.fft.irfft(u_hat, n=self.solver_res)
        return -0.5j * self._k * self._dealias * torch.fft.rfft(u * u)

    def _stable_dt(self, u_hat: torch.Tensor) -> float:
        speed = float(torch.fft.irfft(u_hat, n=self.solver_res).abs().max())
        limit = self.cfl * RK3_IMAGINARY_LIMIT / (self._kmax * speed) if speed > 0 else math.inf
        return min(self.dt_max, limit)

    def solve(self, u0: torch.Tensor) -> torch.Tensor:
        """``u0`` ``[B, n]`` (n = solver_res) -> ``[B, res, T, 1]``."""
        linear = -self.nu * self._k**2
        u_hat = torch.fft.rfft(u0.to(self.device, self.dtype)) * self._dealias
        frames = [torch.fft.irfft(u_hat, n=self.solver_res)] if self.include_initial else []
        interval = self.t_end / self.steps
        for _ in range(self.steps):
            count, dt = substeps(interval, self._stable_dt(u_hat))
            for _ in range(count):
                u_hat = imex_rk3_cn_step(u_hat, dt, linear, self._tendency)
            frames.append(torch.fft.irfft(u_hat, n=self.solver_res))
        u = torch.stack(frames, dim=-1)[:, :: self.solver_res // self.res]
        return u[..., None]

"""2-D diffusion–reaction, FitzHugh–Nagumo (the PDEBench 2D DR set).

    du/dt = D_u Laplacian u + u - u^3 - k - v,   dv/dt = D_v Laplacian v + u - v,
    D_u = 1e-3, D_v = 5e-3, k = 5e-3, on [-1, 1]^2 with no-flux (Neumann) boundaries, t in [0, 5],
    u0, v0 ~ N(0, 1) independently per cell (as PDEBench).

Cell-centred grid. Diffusion is solved exactly in the cosine basis, which is the Neumann
eigenbasis: the field is mirrored across each wall (an even extension with period 4) and
multiplied by ``exp(-D |k|^2 dt)`` in Fourier space. Reaction is integrated pointwise by RK4,
combined by Strang splitting (second order). With ``reaction=False`` every cosine mode
``cos(pi m (x + 1) / 2)`` decays exactly as ``exp(-D (pi m / 2)^2 t)``.

PDEBench uses a finite-volume discretization, so data agree statistically, not bitwise.
Defaults: 128 x 128, 101 frames (t = 0, 0.05, ..., 5), solver step 0.01.
Output ``[B, res, res, T, 2]``, fields ``u, v``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from opzoo.data.generators.base import PDEGenerator
from opzoo.data.generators.grf import wavenumbers
from opzoo.data.generators.timestepping import substeps


def mirror(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """Even extension across the upper wall of each axis in ``dims`` (doubles those axes)."""
    for d in dims:
        x = torch.cat([x, torch.flip(x, dims=(d,))], dim=d)
    return x


class DiffusionReaction2D(PDEGenerator):
    kind = "diffusion-reaction"
    version = "1"
    pde = "diffusion-reaction-fitzhugh-nagumo"
    fields = ("u", "v")
    length = 2.0  # domain [-1, 1]

    def __init__(
        self,
        res: int = 128,
        steps: int = 100,
        t_end: float = 5.0,
        du: float = 1e-3,
        dv: float = 5e-3,
        k: float = 5e-3,
        reaction: bool = True,
        dt_max: float = 1e-2,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__(device, dtype)
        self.res, self.steps, self.t_end = int(res), int(steps), float(t_end)
        self.du, self.dv, self.k = float(du), float(dv), float(k)
        self.reaction, self.dt_max = reaction, float(dt_max)
        kx, ky = wavenumbers((2 * self.res, 2 * self.res), length=2 * self.length, rfft=True, dtype=dtype)
        self._k2 = (kx**2 + ky**2).to(self.device)

    @property
    def coords(self) -> dict[str, np.ndarray]:
        h = self.length / self.res
        x = -1.0 + h * (np.arange(self.res) + 0.5)
        return {"x": x, "y": x}

    def params(self) -> dict[str, Any]:
        return dict(
            du=self.du, dv=self.dv, k=self.k, reaction=self.reaction, domain=[[-1, 1], [-1, 1]],
            boundary="neumann (no flux)", res=self.res, steps=self.steps, t_end=self.t_end,
            dt_max=self.dt_max, initial="standard normal per cell",
            scheme="exact cosine-basis diffusion + RK4 reaction, Strang splitting",
        )

    def sample_input(self, generator: torch.Generator) -> torch.Tensor:
        return torch.randn((self.res, self.res, 2), generator=generator, dtype=torch.float64)

    def _diffuse(self, uv: torch.Tensor, dt: float) -> torch.Tensor:
        """Exact Neumann diffusion over ``dt`` of ``uv`` ``[B, X, Y, 2]``."""
        n = self.res
        spectra = torch.fft.rfft2(mirror(uv.movedim(-1, 1), (2, 3)))  # [B, 2, 2X, Y+1]
        rates = torch.tensor([self.du, self.dv], dtype=self.dtype, device=self.device).view(1, 2, 1, 1)
        decayed = torch.fft.irfft2(spectra * torch.exp(-rates * self._k2 * dt), s=(2 * n, 2 * n))
        return decayed[..., :n, :n].movedim(1, -1)

    def _reaction_rate(self, uv: torch.Tensor) -> torch.Tensor:
        u, v = uv[..., 0], uv[..., 1]
        return torch.stack([u - u**3 - self.k - v, u - v], dim=-1)

    def _react(self, uv: torch.Tensor, dt: float) -> torch.Tensor:
        k1 = self._reaction_rate(uv)
        k2 = self._reaction_rate(uv + 0.5 * dt * k1)
        k3 = self._reaction_rate(uv + 0.5 * dt * k2)
        k4 = self._reaction_rate(uv + dt * k3)
        return uv + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)

    def solve(self, uv0: torch.Tensor) -> torch.Tensor:
        """``uv0`` ``[B, res, res, 2]`` -> ``[B, res, res, T, 2]``."""
        uv = uv0.to(self.device, self.dtype)
        frames = [uv]
        count, dt = substeps(self.t_end / self.steps, self.dt_max)
        for _ in range(self.steps):
            if not self.reaction:
                uv = self._diffuse(uv, count * dt)
            else:
                # Strang splitting D(dt/2) R D(dt/2) per step; the inner half steps of
                # consecutive steps are merged into one D(dt).
                uv = self._diffuse(uv, dt / 2)
                for i in range(count):
                    uv = self._diffuse(self._react(uv, dt), dt if i < count - 1 else dt / 2)
            frames.append(uv)
        return torch.stack(frames, dim=-2)

"""2-D shallow water, radial dam break with reflective walls (the PDEBench 2D SWE set).

    dh/dt + div(h u) = 0,   d(h u)/dt + div(h u u + g h^2 / 2 I) = 0,   g = 1,
    on [-2.5, 2.5]^2 with reflective walls, t in [0, 1];
    h0 = 1 + (2 - 1) * (1 - tanh((|x| - r) / w)) / 2: a dam of radius r ~ U(0.3, 0.7) about the origin, its edge a
    tanh of width w = dx / 2 (half a cell); u0 = 0.

Version 2: the edge was a sharp step, so the initial state depended on r only through which cell centres fall
inside the circle: at 32 x 32 (dx = 0.156) a handful of states covered every r in [0.3, 0.7], and a file of 48
trajectories held 15 distinct ones (issue 60). With the tanh edge every cell's height moves with r, so every
trajectory is another.

Finite volumes: MUSCL reconstruction of (h, u, v) with minmod slopes, HLL fluxes, SSP-RK2 in
time, CFL-limited steps that land exactly on the recorded times. Walls are mirror ghost cells
(normal velocity negated), which makes the wall mass flux exactly zero, so total mass is
conserved to rounding. PDEBench used PyClaw (a Roe solver); data agree physically, not bitwise.

Defaults: 128 x 128 cells, 101 frames (t = 0, 0.01, ..., 1). Output ``[B, res, res, T, 1]``
with field ``h`` (as PDEBench), or ``[.., 3]`` ``h, hu, hv`` with ``momentum=True``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from opzoo.data.generators.base import PDEGenerator

_X = 2  # the normal axis in [B, 3, X, Y]


def _minmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(a * b > 0, torch.sign(a) * torch.minimum(a.abs(), b.abs()), torch.zeros_like(a))


class ShallowWater2D(PDEGenerator):
    kind = "swe"
    version = "2"
    pde = "shallow-water"
    length = 5.0  # domain [-2.5, 2.5]

    def __init__(
        self,
        res: int = 128,
        steps: int = 100,
        t_end: float = 1.0,
        gravity: float = 1.0,
        h_in: float = 2.0,
        h_out: float = 1.0,
        radius_range: tuple[float, float] = (0.3, 0.7),
        momentum: bool = False,
        cfl: float = 0.4,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__(device, dtype)
        self.res, self.steps, self.t_end = int(res), int(steps), float(t_end)
        self.g, self.h_in, self.h_out = float(gravity), float(h_in), float(h_out)
        self.radius_range = (float(radius_range[0]), float(radius_range[1]))
        self.momentum, self.cfl = momentum, float(cfl)
        self.dx = self.length / self.res
        self.edge_width = self.dx / 2

    @property
    def fields(self) -> tuple[str, ...]:
        return ("h", "hu", "hv") if self.momentum else ("h",)

    @property
    def coords(self) -> dict[str, np.ndarray]:
        x = -self.length / 2 + self.dx * (np.arange(self.res) + 0.5)
        return {"x": x, "y": x}

    def params(self) -> dict[str, Any]:
        return dict(
            gravity=self.g, h_in=self.h_in, h_out=self.h_out, radius_range=list(self.radius_range),
            dam_edge=f"tanh of width dx/2 = {self.edge_width:g}",
            domain=[[-2.5, 2.5], [-2.5, 2.5]], boundary="reflective walls", res=self.res,
            steps=self.steps, t_end=self.t_end, cfl=self.cfl,
            scheme="finite volume, MUSCL-minmod, HLL, SSP-RK2",
        )

    def sample_input(self, generator: torch.Generator) -> torch.Tensor:
        """Initial state ``[X, Y, 3]`` = ``(h, hu, hv)`` of a radial dam break."""
        lo, hi = self.radius_range
        radius = lo + (hi - lo) * float(torch.rand((), generator=generator, dtype=torch.float64))
        x = torch.tensor(self.coords["x"], dtype=torch.float64)
        xx, yy = torch.meshgrid(x, x, indexing="ij")
        inside = 0.5 * (1.0 - torch.tanh((torch.sqrt(xx**2 + yy**2) - radius) / self.edge_width))
        h = self.h_out + (self.h_in - self.h_out) * inside
        return torch.stack([h, torch.zeros_like(h), torch.zeros_like(h)], dim=-1)

    # -- finite volumes on q = [B, 3, X, Y] ---------------------------------------------------
    def _wall_pad(self, q: torch.Tensor) -> torch.Tensor:
        """Two mirror ghost cells at both ends of the x axis, normal momentum negated."""
        sign = torch.tensor([1.0, -1.0, 1.0], dtype=q.dtype, device=q.device).view(1, 3, 1, 1)
        lower = torch.flip(q[:, :, :2], dims=(_X,)) * sign
        upper = torch.flip(q[:, :, -2:], dims=(_X,)) * sign
        return torch.cat([lower, q, upper], dim=_X)

    def _physical_flux(self, h, u, v):
        return torch.stack([h * u, h * u * u + 0.5 * self.g * h * h, h * u * v], dim=1)

    def _divergence_x(self, q: torch.Tensor) -> torch.Tensor:
        """``d F(q) / dx`` along axis X, with reflective walls."""
        p = self._wall_pad(q)
        w = torch.stack([p[:, 0], p[:, 1] / p[:, 0], p[:, 2] / p[:, 0]], dim=1)  # (h, u, v)
        slope = _minmod(w[:, :, 1:-1] - w[:, :, :-2], w[:, :, 2:] - w[:, :, 1:-1])  # cells 1..N+2
        left = w[:, :, 1:-2] + 0.5 * slope[:, :, :-1]  # faces between padded cells j, j+1, j = 1..N+1
        right = w[:, :, 2:-1] - 0.5 * slope[:, :, 1:]
        hl, ul, vl = left.unbind(1)
        hr, ur, vr = right.unbind(1)
        cl, cr = torch.sqrt(self.g * hl), torch.sqrt(self.g * hr)
        s_left = torch.clamp(torch.minimum(ul - cl, ur - cr), max=0.0).unsqueeze(1)
        s_right = torch.clamp(torch.maximum(ul + cl, ur + cr), min=0.0).unsqueeze(1)
        fl, fr = self._physical_flux(hl, ul, vl), self._physical_flux(hr, ur, vr)
        ql = torch.stack([hl, hl * ul, hl * vl], dim=1)
        qr = torch.stack([hr, hr * ur, hr * vr], dim=1)
        flux = (s_right * fl - s_left * fr + s_left * s_right * (qr - ql)) / (s_right - s_left)
        return (flux[:, :, 1:] - flux[:, :, :-1]) / self.dx

    def _rate(self, q: torch.Tensor) -> torch.Tensor:
        """``dq/dt = -(dF/dx + dG/dy)``; the y flux is the x flux of the transposed, swapped state."""
        swap = [0, 2, 1]
        div_y = self._divergence_x(q[:, swap].transpose(2, 3)).transpose(2, 3)[:, swap]
        return -(self._divergence_x(q) + div_y)

    def _stable_dt(self, q: torch.Tensor) -> float:
        h = q[:, 0]
        c = torch.sqrt(self.g * h)
        sx = float((q[:, 1].abs() / h + c).max())
        sy = float((q[:, 2].abs() / h + c).max())
        return self.cfl * self.dx / (sx + sy)

    def solve(self, q0: torch.Tensor) -> torch.Tensor:
        """``q0`` ``[B, X, Y, 3]`` (h, hu, hv) -> ``[B, X, Y, T, C]``."""
        q = q0.to(self.device, self.dtype).movedim(-1, 1)
        frames = [q]
        t = 0.0
        for target in self.times[1:]:
            while t < target - 1e-12 * max(1.0, target):
                dt = min(self._stable_dt(q), target - t)
                q1 = q + dt * self._rate(q)
                q = 0.5 * q + 0.5 * (q1 + dt * self._rate(q1))
                t += dt
            t = float(target)
            frames.append(q)
        out = torch.stack(frames, dim=-1).movedim(1, -1)  # [B, X, Y, T, 3]
        return out if self.momentum else out[..., :1]

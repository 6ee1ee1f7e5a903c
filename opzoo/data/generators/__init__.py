"""Offline PDE generators writing canonical files (docs/training.md).

``GENERATORS`` maps a KIND (``opzoo data generate KIND``) to its class; :func:`generate` builds one
and writes ``n`` trajectories::

    from opzoo.data.generators import generate
    generate("ns", "ns_1e-3.h5", n=100, res=64, nu=1e-3, seed=0, device="cuda")

=====================  ====================================================  ====================
KIND                   PDE                                                   output [N, *S, T, C]
=====================  ====================================================  ====================
ns                     NS vorticity, unit torus, nu 1e-3 / 1e-4 / 1e-5       [N, 64, 64, 50, 1]
diffusion-reaction     FitzHugh–Nagumo on [-1, 1]^2, no-flux                 [N, 128, 128, 101, 2]
swe                    shallow water radial dam break, reflective walls      [N, 128, 128, 101, 1]
burgers                1-D viscous Burgers, periodic, nu 0.1                 [N, 1024, 11, 1]
darcy                  -div(a grad u) = 1, zero Dirichlet                    [N, 64, 64, 1, 2]
=====================  ====================================================  ====================
"""

from __future__ import annotations

import os

import torch

from opzoo.data.generators.base import PDEGenerator, generate_batch, generate_to_file, trajectory_generator
from opzoo.data.generators.burgers import Burgers1D
from opzoo.data.generators.darcy import Darcy2D
from opzoo.data.generators.diffusion_reaction import DiffusionReaction2D
from opzoo.data.generators.grf import gaussian_random_field
from opzoo.data.generators.navier_stokes import NavierStokes2D
from opzoo.data.generators.shallow_water import ShallowWater2D
from opzoo.errors import UnknownNameError

GENERATORS: dict[str, type[PDEGenerator]] = {
    cls.kind: cls for cls in (NavierStokes2D, DiffusionReaction2D, ShallowWater2D, Burgers1D, Darcy2D)
}


def make_generator(kind: str, **options) -> PDEGenerator:
    """Build the generator registered as ``kind`` with keyword ``options`` (``res``, ``nu``, ...)."""
    if kind not in GENERATORS:
        raise UnknownNameError("generator", kind, GENERATORS)
    return GENERATORS[kind](**options)


def generate(
    kind: str,
    out: str | os.PathLike,
    n: int,
    *,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = True,
    overwrite: bool = True,
    device: str | torch.device = "cpu",
    **options,
) -> str:
    """Generate ``n`` trajectories of ``kind`` into the canonical file ``out``; returns the path."""
    gen = make_generator(kind, device=device, **options)
    return generate_to_file(gen, out, n, seed=seed, batch_size=batch_size, progress=progress, overwrite=overwrite)


__all__ = [
    "GENERATORS",
    "PDEGenerator",
    "NavierStokes2D",
    "DiffusionReaction2D",
    "ShallowWater2D",
    "Burgers1D",
    "Darcy2D",
    "gaussian_random_field",
    "make_generator",
    "generate",
    "generate_to_file",
    "generate_batch",
    "trajectory_generator",
]

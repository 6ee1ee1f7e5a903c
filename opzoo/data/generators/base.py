"""The generator interface and the driver that writes generated trajectories to a canonical file.

A generator turns random inputs into trajectories ``[B, *S, T, C]``. The driver draws each
trajectory's random input from its own seeded ``torch.Generator`` (seed derived from
``(seed, trajectory index)``), so a file is reproducible for a seed whatever the batch size or
device, and the first ``k`` trajectories of a run with ``n > k`` equal a run with ``n = k``.
Random inputs are drawn on the CPU; solving happens on ``device``.
"""

from __future__ import annotations

import abc
import os
from typing import Any, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from opzoo.data.canonical import CanonicalWriter
from opzoo.data.errors import GeneratorError


class PDEGenerator(abc.ABC):
    """One PDE family. Subclasses set the class attributes and ``res`` (and ``steps``, ``t_end``
    for the default :attr:`times`), and implement :meth:`params`, :meth:`sample_input` and
    :meth:`solve`; they override :attr:`spatial_shape` and :attr:`times` when their grid or frames
    differ."""

    #: registry name (``opzoo data generate KIND``)
    kind: str = ""
    #: bumped whenever the numbers a seed produces change
    version: str = "1"
    pde: str = ""
    fields: Sequence[str] = ()
    #: number of spatial axes of the written grid
    spatial_ndim: int = 2
    #: whether the recorded frames start with the initial condition
    include_initial: bool = True

    def __init__(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64):
        self.device = torch.device(device)
        self.dtype = dtype

    def _set_resolution(self, res: int, solver_res: int | None) -> None:
        """``self.res`` (written grid) and ``self.solver_res`` (solved grid, a multiple of it; default ``res``)."""
        self.res = int(res)
        self.solver_res = int(solver_res or res)
        if self.solver_res % self.res:
            raise ValueError(f"solver_res {self.solver_res} must be a multiple of res {self.res}")

    @property
    def spatial_shape(self) -> tuple[int, ...]:
        """``S`` of the written trajectories: ``res`` points along each of ``spatial_ndim`` axes."""
        return (self.res,) * self.spatial_ndim

    @property
    def times(self) -> np.ndarray:
        """``[T]`` times of the recorded frames: ``steps`` equal intervals of ``[0, t_end]``, the
        initial frame included unless ``include_initial`` is False."""
        t = np.linspace(0.0, self.t_end, self.steps + 1)
        return t if self.include_initial else t[1:]

    @property
    def spatial_dims(self) -> list[str]:
        return ["x", "y", "z"][: len(self.spatial_shape)]

    @property
    def coords(self) -> dict[str, np.ndarray]:
        """1-D coordinates of each output axis."""
        return {}

    @property
    def dt(self) -> float | None:
        """Time between recorded frames (None for a single frame)."""
        t = self.times
        return float(t[1] - t[0]) if len(t) > 1 else None

    @abc.abstractmethod
    def params(self) -> dict[str, Any]:
        """Every parameter that determines the output (stored as the file's ``params``)."""

    @abc.abstractmethod
    def sample_input(self, generator: torch.Generator) -> torch.Tensor:
        """The random input of one trajectory, drawn on the CPU from ``generator``."""

    @abc.abstractmethod
    def solve(self, inputs: torch.Tensor) -> torch.Tensor:
        """``[B, ...]`` stacked inputs (on ``self.device``) -> trajectories ``[B, *S, T, C]``."""


def trajectory_generator(seed: int, index: int) -> torch.Generator:
    """The CPU torch.Generator for trajectory ``index`` of a run seeded with ``seed``."""
    state = np.random.SeedSequence([int(seed), int(index)]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state) & ((1 << 63) - 1))


def generate_batch(gen: PDEGenerator, seed: int, start: int, count: int) -> torch.Tensor:
    """Trajectories ``start .. start + count - 1`` of a run, ``[count, *S, T, C]`` on ``gen.device``."""
    inputs = torch.stack([gen.sample_input(trajectory_generator(seed, start + i)) for i in range(count)])
    out = gen.solve(inputs.to(gen.device))
    if not torch.isfinite(out).all():
        bad = torch.nonzero(~torch.isfinite(out.reshape(count, -1)).all(dim=1)).ravel() + start
        raise GeneratorError(
            f"{gen.kind}: trajectories {bad.tolist()} (seed {seed}) became NaN/Inf; "
            f"parameters {gen.params()}. Try a smaller time step or a finer solver grid."
        )
    return out


def generate_to_file(
    gen: PDEGenerator,
    out: str | os.PathLike,
    n: int,
    *,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = True,
    overwrite: bool = True,
) -> str:
    """Generate ``n`` trajectories with ``gen`` into the canonical file ``out``.

    Batches of ``batch_size`` trajectories are solved and written one at a time (memory holds one
    batch). The file is written to a temporary name and renamed only on success.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    out = os.fspath(out)
    times = gen.times
    with CanonicalWriter(
        out,
        n,
        gen.spatial_shape,
        len(times),
        list(gen.fields),
        pde=gen.pde,
        params=gen.params(),
        dt=gen.dt,
        times=times,
        spatial_dims=gen.spatial_dims,
        coords=gen.coords,
        generator=f"opzoo.data.generators.{gen.kind}",
        generator_version=gen.version,
        seed=seed,
        overwrite=overwrite,
    ) as writer, tqdm(total=n, unit="traj", desc=f"{gen.kind} -> {os.path.basename(out)}", disable=not progress) as bar:
        for start in range(0, n, batch_size):
            count = min(batch_size, n - start)
            writer.append(generate_batch(gen, seed, start, count))
            bar.update(count)
    return out

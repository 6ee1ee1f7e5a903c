"""Readers for PDEBench's HDF5 layouts.

* ``pdebench-cfd`` (compressible NS, 1/2/3-D): ``density``, ``pressure``, ``Vx`` (, ``Vy``, ``Vz``)
  each ``[N, T, *S]``; ``t-coordinate`` (``T`` or ``T + 1`` entries), ``x-coordinate``, ...
* ``pdebench-tensor`` (Burgers, advection, diffusion-sorption, 2-D Darcy): ``tensor``
  ``[N, T, *S]`` with ``x-coordinate``, ``t-coordinate``.
* ``pdebench-groups`` (2-D SWE, diffusion-reaction): one group per sample ``'0000'``, ``'0001'``...
  each with ``data`` ``[T, *S, C]`` and ``grid/x``, ``grid/y``, ``grid/t``.
"""

from __future__ import annotations

import h5py
import numpy as np

from opzoo.data.readers.axes import SPATIAL, candidate_orders, check_stated_axes, verify_order
from opzoo.data.readers.base import SourceInfo, TrajectorySource, dt_from_times

CFD_SCALARS = ("density", "pressure")
CFD_VELOCITIES = ("Vx", "Vy", "Vz")
AXES = ("x", "y", "z")


def _coords(f: h5py.File, n_dims: int) -> dict[str, np.ndarray]:
    return {a: f[f"{a}-coordinate"][()] for a in AXES[:n_dims] if f"{a}-coordinate" in f}


def _times(t_dataset: h5py.Dataset | None, n_steps: int) -> np.ndarray | None:
    """The first ``n_steps`` times of a time coordinate (PDEBench's ``t-coordinate`` holds T + 1
    edges in the CFD files and T frames elsewhere); None without one or when it is too short."""
    if t_dataset is None:
        return None
    t = np.asarray(t_dataset[()], dtype=np.float64).ravel()
    return t[:n_steps] if len(t) >= n_steps else None


class PDEBenchCFDSource(TrajectorySource):
    """PDEBench compressible NS: one dataset per field, each ``[N, T, *S]``; channels are
    ``density, pressure, Vx[, Vy[, Vz]]``."""

    layout = "pdebench-cfd"
    expects = "datasets 'density', 'pressure', 'Vx' (+ 'Vy', 'Vz' in 2-D/3-D) each [N, T, *S]; 't-coordinate', 'x-coordinate', ..."

    @classmethod
    def detect(cls, f: h5py.File) -> bool:
        return any(k in f for k in (*CFD_SCALARS, *CFD_VELOCITIES))

    def _validate(self, f: h5py.File) -> SourceInfo:
        spec = "[N, T, *S] with 1-3 spatial dims"
        ref = self._require(f, "density", (3, 4, 5), spec)
        n_dims = ref.ndim - 2
        self.field_keys = [*CFD_SCALARS, *CFD_VELOCITIES[:n_dims]]
        for key in self.field_keys:
            ds = self._require(f, key, ref.ndim, f"[N, T, {', '.join(a.upper() for a in AXES[:n_dims])}] like 'density'")
            if ds.shape != ref.shape:
                raise self._fail(
                    f"key '{key}' has shape {list(ds.shape)}; expected {list(ref.shape)} like 'density' "
                    f"([N, T, {', '.join(a.upper() for a in AXES[:n_dims])}])"
                )
        n, steps, *spatial = ref.shape
        times = _times(f.get("t-coordinate"), steps)
        return SourceInfo(
            layout=self.layout,
            n_samples=n,
            spatial_shape=tuple(spatial),
            n_steps=steps,
            fields=list(self.field_keys),
            dt=dt_from_times(times),
            times=times,
            pde="compressible-navier-stokes",
            coords=_coords(f, n_dims),
            attrs=dict(f.attrs),
        )

    def _key_of(self, sample: int) -> str:
        return ", ".join(self.field_keys)

    def _read(self, f: h5py.File, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        frames = [f[key][sample, t_start:t_stop] for key in self.field_keys]  # each [t, *S]
        return np.moveaxis(np.stack(frames, axis=-1), 0, -2)  # [*S, t, C]


class PDEBenchTensorSource(TrajectorySource):
    """PDEBench single-field files: ``tensor`` ``[N, T, *S]`` (one channel ``u``).

    The key ``tensor`` says nothing about the order of its axes, so the order is read from the file's coordinates
    (:mod:`opzoo.data.readers.axes`): PDEBench's own ``[N, T, *S]`` when its ``t-coordinate`` and ``x-coordinate``...
    confirm it, the one other order they fit (a user's ``[N, X, Y, T]``), or ``pdebench-tensor:<axes>`` as named; a
    file without coordinates is refused with each reading."""

    layout = "pdebench-tensor"
    expects = "dataset 'tensor' [N, T, *S] with 'x-coordinate', 't-coordinate' (another order: 'pdebench-tensor:NXYT')"
    takes_order = True

    def __init__(self, path, check_finite: bool = True, order: str = ""):
        self.order_spec = order
        super().__init__(path, check_finite=check_finite)

    @classmethod
    def detect(cls, f: h5py.File) -> bool:
        return "tensor" in f

    def _validate(self, f: h5py.File) -> SourceInfo:
        ds = self._require(f, "tensor", (3, 4, 5), "[N, T, *S] with 1-3 spatial dims")
        rank = ds.ndim
        coords = {a.upper(): int(np.size(f[f"{a}-coordinate"])) for a in AXES if f"{a}-coordinate" in f}
        t = f.get("t-coordinate")
        stated = check_stated_axes(self.order_spec, rank, f"layout '{self.layout}:{self.order_spec}'", channels=False) \
            if self.order_spec else ""
        order = verify_order(self.path, "tensor", tuple(ds.shape), "NT" + SPATIAL[:rank - 2],
                             candidate_orders(rank, "N", channels=False), coords,
                             None if t is None else int(np.size(t)), self.layout, stated, refuse_unchecked=True)
        self.axes = order.axes
        size = dict(zip(self.axes, ds.shape))
        spatial = [size[a] for a in SPATIAL if a in size]
        times = _times(t, size["T"])
        return SourceInfo(
            layout=self.layout,
            n_samples=size["N"],
            spatial_shape=tuple(spatial),
            n_steps=size["T"],
            fields=["u"],
            dt=dt_from_times(times),
            times=times,
            coords=_coords(f, len(spatial)),
            attrs=dict(f.attrs),
            axis_note=order.note,
        )

    def _key_of(self, sample: int) -> str:
        return "tensor"

    def _read(self, f: h5py.File, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        index = tuple(sample if a == "N" else slice(t_start, t_stop) if a == "T" else slice(None) for a in self.axes)
        rest = self.axes.replace("N", "")
        one = f["tensor"][index]
        return np.transpose(one, [rest.index(a) for a in [*(s for s in SPATIAL if s in rest), "T"]])[..., None]


class PDEBenchGroupsSource(TrajectorySource):
    """PDEBench per-sample groups (2-D SWE, diffusion-reaction): ``'0000/data'`` ``[T, *S, C]``.

    Samples are the groups whose names are digits, in numeric order. PDEBench stores no channel
    names; channels are called ``c0, c1, ...``.
    """

    layout = "pdebench-groups"
    expects = "groups '0000', '0001', ... each with dataset 'data' [T, *S, C] and 'grid/x', 'grid/y', 'grid/t'"

    @classmethod
    def detect(cls, f: h5py.File) -> bool:
        return any(k.isdigit() and isinstance(f[k], h5py.Group) for k in f.keys())

    def _validate(self, f: h5py.File) -> SourceInfo:
        self.sample_keys = sorted((k for k in f.keys() if k.isdigit()), key=int)
        spec = "[T, *S, C] with 1-3 spatial dims"
        ref = self._require(f[self.sample_keys[0]], "data", (3, 4, 5), spec)
        for key in self.sample_keys:
            group = f[key]
            if not isinstance(group, h5py.Group):
                raise self._fail(f"key '{key}' is a dataset; expected a group holding 'data' {spec}")
            ds = self._require(group, "data", ref.ndim, spec)
            if ds.shape != ref.shape:
                raise self._fail(
                    f"key '{key}/data' has shape {list(ds.shape)}; expected {list(ref.shape)} like "
                    f"'{self.sample_keys[0]}/data' ([T, *S, C])"
                )
        steps, *spatial, channels = ref.shape
        grid = f[self.sample_keys[0]].get("grid")
        times = None
        coords: dict[str, np.ndarray] = {}
        if isinstance(grid, h5py.Group):
            times = _times(grid.get("t"), steps)
            coords = {a: grid[a][()] for a in AXES[: len(spatial)] if a in grid}
        return SourceInfo(
            layout=self.layout,
            n_samples=len(self.sample_keys),
            spatial_shape=tuple(spatial),
            n_steps=steps,
            fields=[f"c{i}" for i in range(channels)],
            dt=dt_from_times(times),
            times=times,
            coords=coords,
            attrs=dict(f.attrs),
        )

    def _key_of(self, sample: int) -> str:
        return f"{self.sample_keys[sample]}/data"

    def _read(self, f: h5py.File, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        return np.moveaxis(f[self.sample_keys[sample]]["data"][t_start:t_stop], 0, -2)

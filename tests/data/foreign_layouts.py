"""Writers of small files in the foreign layouts, with the original key names and axis orders.

Each takes reference trajectories ``[N, *S, T, C]`` (what a reader must return) and lays them out
as the original dataset does on disk.
"""

from __future__ import annotations

import h5py
import numpy as np


def write_pdebench_cfd(path, data: np.ndarray, dt: float = 0.05) -> None:
    """PDEBench 2D CFD: ``density``, ``pressure``, ``Vx``, ``Vy`` each ``[N, T, X, Y]``;
    ``t-coordinate`` has T + 1 entries as in the originals."""
    n, x, y, t, c = data.shape
    assert c == 4
    with h5py.File(path, "w") as f:
        for i, key in enumerate(["density", "pressure", "Vx", "Vy"]):
            f.create_dataset(key, data=np.transpose(data[..., i], (0, 3, 1, 2)))  # [N, T, X, Y]
        f["t-coordinate"] = dt * np.arange(t + 1, dtype=np.float32)
        f["x-coordinate"] = np.linspace(0, 1, x, dtype=np.float32)
        f["y-coordinate"] = np.linspace(0, 1, y, dtype=np.float32)


def write_pdebench_groups(path, data: np.ndarray, dt: float = 0.01) -> None:
    """PDEBench SWE / diffusion-reaction: ``'0000/data'`` ``[T, X, Y, C]``, ``'0000/grid/x'``..."""
    n, x, y, t, c = data.shape
    with h5py.File(path, "w") as f:
        for i in range(n):
            g = f.create_group(f"{i:04d}")
            g.create_dataset("data", data=np.transpose(data[i], (2, 0, 1, 3)))  # [T, X, Y, C]
            g["grid/x"] = np.linspace(-1, 1, x, dtype=np.float32)
            g["grid/y"] = np.linspace(-1, 1, y, dtype=np.float32)
            g["grid/t"] = dt * np.arange(t, dtype=np.float32)


def write_fno_mat(path, data: np.ndarray, initial: np.ndarray, times: np.ndarray) -> None:
    """FNO NS, MATLAB v7.3: MATLAB ``u`` ``[N, X, Y, T]`` is ``[T, Y, X, N]`` in HDF5 (h5py
    reverses MATLAB's column-major axes); ``a`` ``[N, X, Y]`` -> ``[Y, X, N]``; ``t`` ``[1, T]`` ->
    ``[T, 1]``. Includes MATLAB's 512-byte user block header and ``MATLAB_class`` attributes."""
    u_matlab = data[..., 0]  # [N, X, Y, T]
    with h5py.File(path, "w", userblock_size=512) as f:
        for key, value in (("a", initial), ("u", u_matlab), ("t", times[None, :])):
            ds = f.create_dataset(key, data=np.ascontiguousarray(np.transpose(value)).astype(np.float32))
            ds.attrs["MATLAB_class"] = np.bytes_("single")
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2021 HDF5 schema 1.00 ."
    with open(path, "r+b") as raw:
        raw.write(header.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02IM")


def write_the_well(path, scalars: dict, vectors: dict, tensors: dict, times: np.ndarray, static: dict | None = None) -> None:
    """The Well: root attrs, ``dimensions``, ``boundary_conditions``, ``scalars``, and
    ``t0_fields/<name>`` ``[N, T, X, Y]``, ``t1_fields/<name>`` ``[N, T, X, Y, 2]``,
    ``t2_fields/<name>`` ``[N, T, X, Y, 2, 2]``; ``static`` t0 fields are ``[N, X, Y]`` with
    ``time_varying = False``."""
    first = next(iter(scalars.values()))
    n, t, x, y = first.shape
    with h5py.File(path, "w") as f:
        f.attrs["dataset_name"] = "test_dataset"
        f.attrs["grid_type"] = "cartesian"
        f.attrs["n_spatial_dims"] = 2
        f.attrs["n_trajectories"] = n
        f.attrs["simulation_parameters"] = ["Reynolds"]
        f.attrs["Reynolds"] = 100.0
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = ["x", "y"]
        dims["time"] = times.astype(np.float32)
        dims["time"].attrs["sample_varying"] = False
        for name, size in (("x", x), ("y", y)):
            dims[name] = np.linspace(0, 1, size, dtype=np.float32)
            dims[name].attrs["sample_varying"] = False
            dims[name].attrs["time_varying"] = False
        bcs = f.create_group("boundary_conditions")
        for axis, size in (("x", x), ("y", y)):
            g = bcs.create_group(f"{axis}_periodic")
            g.attrs["associated_dims"] = [axis]
            g.attrs["associated_fields"] = []
            g.attrs["bc_type"] = "PERIODIC"
            g.attrs["sample_varying"] = False
            g.attrs["time_varying"] = False
            mask = np.zeros(size, dtype=bool)
            mask[[0, -1]] = True
            g["mask"] = mask
        sc = f.create_group("scalars")
        sc.attrs["field_names"] = ["Reynolds"]
        sc["Reynolds"] = np.float32(100.0)
        for group_name, fields in (("t0_fields", {**scalars, **(static or {})}), ("t1_fields", vectors), ("t2_fields", tensors)):
            g = f.create_group(group_name)
            g.attrs["field_names"] = list(fields)
            for name, value in fields.items():
                ds = g.create_dataset(name, data=value.astype(np.float32))
                ds.attrs["dim_varying"] = [True, True]
                ds.attrs["sample_varying"] = True
                ds.attrs["time_varying"] = not (static and name in static)
                if group_name == "t2_fields":
                    ds.attrs["symmetric"] = False
                    ds.attrs["antisymmetric"] = False

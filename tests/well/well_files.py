"""Small files in The Well's HDF5 layout (docs/data_format.md of PolymathicAI/the_well), for tests."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from opzoo_well.datasets import dataset, read_stats


def _component_stats(stats: dict, key: str, field: str) -> np.ndarray:
    return np.asarray(stats[key][field], dtype=np.float64)


def write_well_file(path: Path, name: str, spatial: tuple[int, ...], n_traj: int, n_steps: int, seed: int = 0,
                    constants_first: bool = True, reverse_fields: bool = False) -> Path:
    """A file of dataset ``name``'s fields at ``spatial`` with values ``mean + std * noise`` (its stats).

    Constant fields are sample-varying and time-invariant, as in The Well; with ``constants_first``
    they come first in ``t0_fields``'s ``field_names``, so that a reader must match channels by name.
    ``reverse_fields`` lists every group's fields in reverse (values drawn as in the canonical order, so
    the file holds the same data as with ``reverse_fields=False``, only stored in another order).
    """
    d, stats = dataset(name), read_stats(name)
    rng = np.random.default_rng(seed)
    axes = ["x", "y", "z"][: len(spatial)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs.update(dataset_name=name, grid_type="cartesian", n_spatial_dims=len(spatial),
                       n_trajectories=n_traj, simulation_parameters=[])
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = axes
        dims.create_dataset("time", data=np.linspace(0, 1, n_steps, dtype=np.float32))
        dims["time"].attrs["sample_varying"] = False
        for a, n in zip(axes, spatial):
            dims.create_dataset(a, data=np.linspace(0, 1, n, dtype=np.float32))
            dims[a].attrs["sample_varying"] = False
        f.create_group("boundary_conditions")
        f.create_group("scalars").attrs["field_names"] = []
        groups = [f.create_group(f"t{i}_fields") for i in range(3)]
        names: dict[int, list[str]] = {0: [], 1: [], 2: []}
        everything = [(fld, False) for fld in d.fields] + [(fld, True) for fld in d.constant_fields]
        if constants_first:
            everything.sort(key=lambda item: not item[1])
        drawn = []
        for fld, constant in everything:
            comp = (len(spatial),) * fld.order
            mean = _component_stats(stats, "mean", fld.name).reshape(comp)
            std = _component_stats(stats, "std", fld.name).reshape(comp)
            shape = (n_traj,) + (() if constant else (n_steps,)) + tuple(spatial) + comp
            drawn.append((fld, constant, (mean + std * rng.standard_normal(shape)).astype(np.float32)))
        for fld, constant, values in (reversed(drawn) if reverse_fields else drawn):
            ds = groups[fld.order].create_dataset(fld.name, data=values)
            ds.attrs.update(sample_varying=True, time_varying=not constant, dim_varying=[True] * len(spatial))
            names[fld.order].append(fld.name)
        for i, g in enumerate(groups):
            g.attrs["field_names"] = names[i]
    return path

"""Small files laid out like three of The Well's datasets GPhyT trained on (rayleigh_benard, euler_multi_quadrants,
shear_flow), written the same, bit for bit, wherever they are made: by tests/gphyt/record_training_sets.py (which
feeds them to upstream's preprocess.py) and by tests/gphyt/test_training_sets.py (which feeds them to opzoo).

The grids are chosen so that upstream's resampling to 256 x 128 is the identity (shear_flow is stored 128 x 256 and
transposed first); no opzoo import: the recording process imports upstream's code only."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

N_TRAJ, N_STEPS = 2, 6
# dataset: (grid as stored, scalar fields (t0), vector fields (t1))
LAYOUTS = {
    "rayleigh_benard": ((256, 128), ("buoyancy", "pressure"), ("velocity",)),
    "euler_multi_quadrants_periodicBC": ((256, 128), ("density", "energy", "pressure"), ("momentum",)),
    "shear_flow": ((128, 256), ("tracer", "pressure"), ("velocity",)),
}


def _values(rng: np.random.Generator, shape: tuple[int, ...], offset: float, scale: float) -> np.ndarray:
    """Smooth-ish fields: a random field plus a per-trajectory offset (so that statistics are not trivially 0/1)."""
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


def write(path: Path, name: str, seed: int = 0) -> Path:
    """A file of dataset ``name`` in The Well's layout (docs/data_format.md of PolymathicAI/the_well)."""
    grid, scalars, vectors = LAYOUTS[name]
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs.update(dataset_name=name, grid_type="cartesian", n_spatial_dims=2, n_trajectories=N_TRAJ,
                       simulation_parameters=[])
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = ["x", "y"]
        dims.create_dataset("time", data=np.linspace(0, 1, N_STEPS, dtype=np.float32))
        dims["time"].attrs["sample_varying"] = False
        for axis, n in zip("xy", grid):
            dims.create_dataset(axis, data=np.linspace(0, 1, n, dtype=np.float32))
            dims[axis].attrs["sample_varying"] = False
        bc = f.create_group("boundary_conditions")
        for axis in "xy":
            g = bc.create_group(f"{axis}_periodic")
            g.attrs["bc_type"] = "PERIODIC"
            g.attrs["associated_dims"] = [axis]
        f.create_group("scalars").attrs["field_names"] = []
        t0, t1 = f.create_group("t0_fields"), f.create_group("t1_fields")
        f.create_group("t2_fields").attrs["field_names"] = []
        for k, field in enumerate(scalars):
            shape = (N_TRAJ, N_STEPS, *grid)
            if field == "density":  # positive, away from 0 (velocity = momentum / density)
                data = (1.0 + np.abs(_values(rng, shape, 0.0, 0.3))).astype(np.float32)
            else:
                data = _values(rng, shape, 0.3 * k, 0.5)
            ds = t0.create_dataset(field, data=data)
            ds.attrs.update(sample_varying=True, time_varying=True, dim_varying=[True, True])
        t0.attrs["field_names"] = list(scalars)
        for field in vectors:
            ds = t1.create_dataset(field, data=_values(rng, (N_TRAJ, N_STEPS, *grid, 2), -0.2, 1.0))
            ds.attrs.update(sample_varying=True, time_varying=True, dim_varying=[True, True])
        t1.attrs["field_names"] = list(vectors)
    return path

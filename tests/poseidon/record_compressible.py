"""Records what Poseidon's upstream data pipeline feeds its network from compressible files in physical units, for
tests/poseidon/test_data_contract.py (opzoo's fit of the same files must feed the same numbers).

Upstream reads its compressible pretraining sets (``CE-Gauss.nc``, ``CE-RP.nc``, ...: ``data [N, T, C, 128, 128]``,
density, velocity x and y, pressure in physical units) with ``scOT/problems/fluids/compressible.py``'s
``CompressibleBase``: each set's mean pressure subtracted, then the pretraining constants. This runs that code from a
checkout at v1-paper, in a process of its own and without importing opzoo:

    git clone https://github.com/camlab-ethz/poseidon && git -C poseidon checkout v1-paper
    make poseidon-reference   # REF = .venv/reference/poseidon-transformers-4.29.2 (its accelerate too)
    PYTHONPATH=REF OPZOO_POSEIDON_REPO=poseidon OMP_NUM_THREADS=1 python tests/poseidon/record_compressible.py [OUT]

It writes ``compressible.json`` into tests/poseidon/data/ (or OUT): per dataset, upstream's ``pixel_values`` for the
pair of frames (0, 2) of trajectory 0 (the pretraining pairs' spacing), at 256 fixed positions and as per-channel
means."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

N_TRAJ, N_STEPS, N = 2, 15, 128  # upstream reads up to 7 pairs spaced 2 frames apart: 15 frames
DATASETS = {"CE-Gauss": "Gaussians", "CE-RP": "Riemann"}
N_POSITIONS = 256


def write(path: Path, seed: int) -> Path:
    """A compressible file in upstream's layout: ``data [N, T, 4, H, W]`` (density, velocity x, y, pressure) in
    physical units, pressure around 2.5 (no opzoo import: the same bits wherever it is written)."""
    rng = np.random.default_rng(seed)
    shape = (N_TRAJ, N_STEPS, 1, N, N)
    density = 1.0 + 0.3 * np.abs(rng.standard_normal(shape))
    velocity = 0.4 * rng.standard_normal((N_TRAJ, N_STEPS, 2, N, N))
    pressure = 2.5 + 0.5 * rng.standard_normal(shape)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.concatenate([density, velocity, pressure], axis=2).astype(np.float32))
    return path


def positions(shape: tuple[int, ...], n: int = N_POSITIONS) -> list[list[int]]:
    rng = np.random.default_rng(4321)
    return np.stack([rng.integers(0, s, n) for s in shape], axis=1).tolist()


def main() -> None:
    repo = Path(os.environ["OPZOO_POSEIDON_REPO"]).resolve()
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("data")
    sys.path.insert(0, str(repo))
    from scOT.problems.fluids import compressible

    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    record = {"upstream": {"repo": "camlab-ethz/poseidon", "commit": commit,
                           "code": "scOT/problems/fluids/compressible.py (CompressibleBase.__getitem__)"},
              "pair": {"trajectory": 0, "t1": 0, "t2": 2}, "datasets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, cls) in enumerate(DATASETS.items()):
            write(Path(tmp) / f"{name}.nc", seed=k)
            ds = getattr(compressible, cls)(which="train", num_trajectories=N_TRAJ, data_path=tmp,
                                            max_num_time_steps=7, time_step_size=2)
            idx = ds.time_indices.index((0, 2))  # trajectory 0: its items come first
            item = ds[idx]
            x = item["pixel_values"].double().numpy()  # [C, H, W]
            where = positions(x.shape)
            record["datasets"][name] = {"mean_pressure": ds.mean_pressure, "time": float(item["time"]),
                                        "positions": where, "values": [float(x[tuple(p)]) for p in where],
                                        "channel_mean": x.mean(axis=(1, 2)).tolist()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "compressible.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out / 'compressible.json'}")


if __name__ == "__main__":
    main()

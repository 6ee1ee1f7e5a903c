"""Small generated datasets with exact solutions, written as canonical HDF5 files (``data [N, *S, T, C]``).

- heat: 2-D periodic heat equation, a few random Fourier modes each decaying as ``exp(-ν|k|²t)``.
- advection: 2-D periodic transport at a random constant velocity (exact shift in Fourier space), 2 channels.
"""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pytest


def heat_trajectories(n: int, res: int, steps: int, seed: int, nu: float = 0.02, dt: float = 0.05) -> np.ndarray:
    """``[n, res, res, steps, 1]``: u = Σ a_k cos(2π(k·x) + φ) exp(-ν(2π|k|)² t)."""
    rng = np.random.default_rng(seed)
    x = np.arange(res) / res
    X, Y = np.meshgrid(x, x, indexing="ij")
    t = np.arange(steps) * dt
    out = np.zeros((n, res, res, steps, 1), dtype=np.float32)
    for i in range(n):
        u = np.full((res, res, steps), 1.0)
        for _ in range(4):
            k = rng.integers(-3, 4, size=2)
            a, phi = rng.normal(), rng.uniform(0, 2 * math.pi)
            decay = np.exp(-nu * (2 * math.pi) ** 2 * (k @ k) * t)
            u = u + a * np.cos(2 * math.pi * (k[0] * X + k[1] * Y) + phi)[..., None] * decay
        out[i, ..., 0] = u
    return out


def advection_trajectories(n: int, res: int, steps: int, seed: int, dt: float = 0.02) -> np.ndarray:
    """``[n, res, res, steps, 2]``: two random smooth fields transported at random velocities."""
    rng = np.random.default_rng(seed)
    x = np.arange(res) / res
    X, Y = np.meshgrid(x, x, indexing="ij")
    t = np.arange(steps) * dt
    out = np.zeros((n, res, res, steps, 2), dtype=np.float32)
    for i in range(n):
        for c in range(2):
            v = rng.uniform(-1, 1, size=2)
            u = np.zeros((res, res, steps))
            for _ in range(3):
                k = rng.integers(-2, 3, size=2)
                a, phi = rng.normal(), rng.uniform(0, 2 * math.pi)
                arg = 2 * math.pi * (k[0] * (X[..., None] - v[0] * t) + k[1] * (Y[..., None] - v[1] * t)) + phi
                u += a * np.cos(arg)
            out[i, ..., c] = u + 2.0
    return out


def write_canonical(path: Path, data: np.ndarray, fields: list[str], pde: str) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data)
        f.attrs["fields"] = fields
        f.attrs["pde"] = pde
    return path


@pytest.fixture(scope="session")
def datasets(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("data")
    return {
        "heat": write_canonical(d / "heat.h5", heat_trajectories(24, 16, 14, seed=0), ["u"], "heat"),
        "advection": write_canonical(d / "advection.h5", advection_trajectories(24, 24, 14, seed=1), ["a", "b"], "advection"),
    }


def micro_pot_args(channels: int = 2, t_in: int = 4) -> dict:
    return {"in_channels": channels, "out_channels": channels, "in_timesteps": t_in, "img_size": [16, 16],
            "patch_size": 2, "width": 32, "depth": 2, "out_layer_dim": 16, "norm_groups": 4,
            "mixer": "fourier-attention", "mixer_args": {"n_blocks": 4, "modes": 4}}


def run_document(out: Path, datasets: dict[str, Path], **sections) -> dict:
    doc = {
        "output_dir": str(out),
        "seed": 0,
        "model": {"name": "pot", "args": micro_pot_args()},
        "data": {"datasets": [{"name": k, "path": str(v), "test_fraction": 0.125} for k, v in datasets.items()],
                 "resolution": [16, 16], "max_test_trajectories": 3},
        "training": {"steps": 6, "batch_size": 4, "log_every": 1},
        "checkpoint": {"every": 2, "keep_last": 2},
        "evaluation": {"plots": False},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


def tiny_pot_args(channels: int = 2, t_in: int = 4) -> dict:
    """A very small POT for tests of the machinery (not of learning)."""
    return {**micro_pot_args(channels, t_in), "patch_size": 4, "width": 16, "depth": 1, "out_layer_dim": 8,
            "mixer": "fourier-attention", "mixer_args": {"n_blocks": 2, "modes": 2}}


def run_cli(*args: str, env: dict | None = None, timeout: float = 300, module: str = "opzoo"):
    """Run ``python -m opzoo ARGS`` in a subprocess; returns the CompletedProcess."""
    import os
    import subprocess
    import sys

    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def write_json(path: Path, doc: dict) -> Path:
    import json

    path.write_text(json.dumps(doc))
    return path


def train_losses(run_dir: Path) -> list[tuple[int, float]]:
    from opzoo.training import read_log

    return [(r["step"], r["loss"]) for r in read_log(Path(run_dir) / "log.jsonl")]


@pytest.fixture
def missing_rank(monkeypatch):
    """This process as rank 0 of 2 under torchrun's variables, on a free port where rank 1 never comes."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(k, v)

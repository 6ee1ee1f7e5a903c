"""Shared fixtures of the opzoo-mup tests: a tiny generated Burgers file and run documents on it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def burgers_file(tmp_path_factory) -> Path:
    """``data [16, 32, 2, 1]``: u0 and u(., 1) of viscous Burgers (opzoo's generator, nu = 0.1)."""
    from opzoo.data import generate

    path = tmp_path_factory.mktemp("mup-data") / "burgers.h5"
    generate("burgers", path, 16, seed=0, batch_size=16, progress=False, res=32, nu=0.1, steps=1)
    return path


def fno1d_run_document(out: Path, data: Path, **sections) -> dict:
    """A seconds-long FNO-1D run on the Burgers file (u0 -> u(., 1)); ``sections`` update the defaults."""
    doc = {
        "output_dir": str(out),
        "seed": 0,
        "model": {"name": "fno-1d", "args": {"width": 8, "modes": 8, "projection_dim": 8, "depth": 2}},
        "data": {"datasets": [{"name": "burgers", "path": str(data), "test_fraction": 0.25}], "resolution": [32]},
        "optimizer": {"name": "adam", "lr": 3e-3, "betas": [0.9, 0.999], "weight_decay": 0.0, "grad_clip": None},
        "training": {"steps": 8, "batch_size": 4, "log_every": 1, "noise_scale": 0.0},
        "checkpoint": {"every": 4, "keep_last": 3},
        "evaluation": {"plots": False},
    }
    for key, value in sections.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) and isinstance(doc.get(key), dict) else value
    return doc

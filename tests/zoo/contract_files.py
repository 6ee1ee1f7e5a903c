"""The four files of the data-contract conformance test (docs/data-contract.md): one field; three fields with names
no family knows; a 40 x 56 file that states a Dirichlet boundary; a 1-D file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from opzoo.data import write_canonical

N, T = 6, 14  # dpot-micro reads 10 frames


def _smooth(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Trajectories that move: a random field advected one cell per frame along the first axis."""
    *spatial, steps, channels = shape[1:]
    base = rng.standard_normal((shape[0], *spatial, 1, channels)).astype(np.float32)
    frames = [np.roll(base, t, axis=1) for t in range(steps)]
    return np.concatenate(frames, axis=-2)


def contract_files(root: Path) -> dict[str, Path]:
    """``{kind: path}`` for the four files (written once per directory)."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    files = {
        "one-field": (root / "one.h5", (N, 32, 32, T, 1), ["u"], {}),
        "three-unknown-fields": (root / "three.h5", (N, 32, 32, T, 3), ["a", "b", "c"], {}),
        "40x56-dirichlet": (root / "dirichlet.h5", (N, 40, 56, T, 1), ["u"], {"boundary": "dirichlet"}),
        "1-d": (root / "line.h5", (N, 64, T, 1), ["u"], {}),
    }
    out = {}
    for kind, (path, shape, fields, params) in files.items():
        if not path.exists():
            write_canonical(path, _smooth(rng, shape), fields, pde="conformance", params=params)
        out[kind] = path
    return out

"""Datasets a run config asks to generate (``data.datasets[i].generate``) with opzoo.data's generators.

``generate: {kind: ns, n: 48, seed: 0, res: 32, nu: 1e-3, steps: 20}``: when ``path`` does not exist
it is generated first (rank 0; the other ranks wait), so one command runs a whole example.
Every key other than ``kind``, ``n``, ``seed`` and ``batch_size`` is passed to the generator's
constructor (see ``opzoo data generate --help``).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Mapping

from ..data import GENERATORS, generate
from ..errors import ConfigError

RESERVED = ("kind", "n", "seed", "batch_size")


def check_generate_spec(spec: Mapping[str, Any], where: str) -> None:
    """Validate a ``generate`` mapping without running anything."""
    kind = spec.get("kind")
    if kind not in GENERATORS:
        raise ConfigError(f"{where}.kind: {kind!r} is not a generator; known: {', '.join(sorted(GENERATORS))}")
    n = spec.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ConfigError(f"{where}.n: expected an integer >= 2 (trajectories), got {n!r}")
    for key in ("seed", "batch_size"):
        if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], int)):
            raise ConfigError(f"{where}.{key}: expected an integer, got {spec[key]!r}")
    params = inspect.signature(GENERATORS[kind].__init__).parameters
    unknown = sorted(k for k in spec if k not in RESERVED and k not in params)
    if unknown:
        accepted = [p for p in params if p not in ("self", "device", "dtype")]
        raise ConfigError(f"{where}: unknown {kind} generator argument(s) {', '.join(map(repr, unknown))}; "
                          f"accepted: {', '.join(accepted)}")


def generate_dataset(spec: Mapping[str, Any], path: str | Path, progress: bool = True) -> Path:
    """Generate ``spec`` into ``path`` (written to a temp name and renamed by opzoo.data)."""
    options = {k: v for k, v in spec.items() if k not in RESERVED}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    generate(spec["kind"], path, int(spec["n"]), seed=int(spec.get("seed", 0)),
             batch_size=int(spec.get("batch_size", 16)), progress=progress, **options)
    return path


def generate_missing(datasets, progress: bool = True) -> None:
    """Generate every dataset of a run config (``data.datasets``) that names a ``generate`` spec and whose file
    does not exist yet (rank 0 only: the caller waits at a barrier)."""
    for d in datasets:
        if d.generate is not None and not Path(d.path).is_file():
            generate_dataset(d.generate, d.path, progress=progress)

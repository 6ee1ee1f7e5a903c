"""Rerunning a family's recording of its upstream (a ``tests/<family>/record_*.py`` script, run in its own process
with upstream's code from a checkout named by an environment variable), for the slow tests that check the recording
still holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

import pytest


def rerun_recording(script: Path, out: Path, env_var: str, checkout: str, pythonpath: Path | None = None,
                    timeout: int = 600) -> None:
    """Run ``script`` into ``out`` in its own process (one thread), or skip: ``env_var`` names no ``checkout``, or the
    ``pythonpath`` its upstream needs beside it does not exist."""
    if not os.environ.get(env_var):
        pytest.skip(f"{env_var} does not name a checkout of {checkout}")
    if pythonpath is not None and not pythonpath.is_dir():
        pytest.skip(f"{pythonpath} does not exist (`make poseidon-reference`)")
    env = {**os.environ, "OMP_NUM_THREADS": "1", **({"PYTHONPATH": str(pythonpath.resolve())} if pythonpath else {})}
    subprocess.run([sys.executable, str(script), str(out)], env=env, check=True, capture_output=True, timeout=timeout)


def assert_same_outputs(live: Mapping, recorded: Mapping, endings: tuple[str, ...] = ("output64",),
                        rtol: float = 1e-12) -> None:
    """Every recorded float64 output (a name ending in one of ``endings``) equals the rerun's, relative to its largest
    value (float32 outputs are left out: another CPU rounds them otherwise)."""
    for key, value in recorded.items():
        if key.endswith(endings):
            assert (live[key] - value).abs().max().item() <= rtol * max(1.0, value.abs().max().item()), key

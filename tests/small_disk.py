"""A small disk to fill: a tmpfs of a given size mounted for one test (root only; the test is skipped elsewhere)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """``path`` as a mounted tmpfs of ``size`` (``"48k"``) for the block; skips the test without root or tmpfs."""
    path.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("needs root and a mountable tmpfs to fill a disk")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)

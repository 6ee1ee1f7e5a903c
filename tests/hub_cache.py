"""Writing files into huggingface_hub's cache layout, so offline loads find them without a network."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def place_in_hf_cache(cache: Path, repo_id: str, files: Mapping[str, Path], commit: str = COMMIT,
                      ref: str = "main") -> Path:
    """``models--org--name/{refs/<ref>, snapshots/<commit>/<name>}`` with each file hard-linked under its
    name; returns the snapshot directory."""
    root = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():  # a name may hold a subfolder ("mc-s/config.json")
        if not (snapshot / name).exists():
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            os.link(path, snapshot / name)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    return snapshot


def repo_files(repo_dir: Path) -> dict[str, Path]:
    """The files of a saved repo directory, by name."""
    return {p.name: p for p in Path(repo_dir).iterdir() if p.is_file()}

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


def record_pushes(monkeypatch) -> dict:
    """What ``opzoo push`` hands to huggingface_hub, recorded instead of sent (no network here): returns a dict that
    gets ``repo`` (the repo id created) and ``card`` (the README.md uploaded)."""
    from huggingface_hub import constants

    import opzoo.model_io.hub as hub

    uploaded: dict = {}

    class RecordingApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, private=None, exist_ok=False):
            uploaded["repo"] = repo_id

        def upload_folder(self, repo_id, folder_path, **kwargs):
            uploaded["card"] = (Path(folder_path) / "README.md").read_text()
            return "commit-info"

    monkeypatch.setattr(hub, "HfApi", RecordingApi)
    monkeypatch.setattr(hub, "hub_unreachable", lambda wait=None: None)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return uploaded

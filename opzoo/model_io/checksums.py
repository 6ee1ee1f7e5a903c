"""sha256 checksums of files: computed on write, verified on read (checkpoints and saved repos).

A checksum file is JSON ``{"algorithm": "sha256", "files": {name: hexdigest}}``, written last and
atomically (a temp file renamed over it), so its presence means every file it lists was complete.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import OpzooError
from ..files import atomic_writer

ALGORITHM = "sha256"
_CHUNK = 1 << 20


class ChecksumError(OpzooError):
    """A file whose bytes do not match its recorded checksum (or a checksum record that is unreadable)."""

    def __init__(self, message: str, path: Path | None = None):
        super().__init__(message)
        self.path = path


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_file(path: str | os.PathLike, expected: str) -> None:
    """Raise ChecksumError naming ``path`` when its sha256 is not ``expected``."""
    path = Path(path)
    if not path.is_file():
        raise ChecksumError(f"{path}: missing (its checksum is recorded)", path)
    actual = sha256_file(path)
    if actual != expected:
        raise ChecksumError(f"{path}: sha256 {actual[:16]}... does not match the recorded {expected[:16]}... "
                            f"(the file was changed or damaged after it was written)", path)


def write_checksums(directory: str | os.PathLike, names: Iterable[str], record: str) -> dict[str, str]:
    """Hash ``names`` in ``directory`` and write ``record`` (a file name there) atomically, fsynced."""
    directory = Path(directory)
    files = {name: sha256_file(directory / name) for name in names}
    with atomic_writer(directory / record, durable=True) as f:
        json.dump({"algorithm": ALGORITHM, "files": files}, f, indent=1)
    return files


def read_checksums(path: str | os.PathLike) -> dict[str, str]:
    """The ``{name: sha256}`` of a checksum record; ChecksumError naming the file when malformed."""
    path = Path(path)
    from ..errors import ConfigError
    from ..files import read_json

    try:
        doc = read_json(path, "a checksum record", follow_links=False)
    except ConfigError as e:
        raise ChecksumError(f"unreadable checksum record: {e}", path) from None
    if not isinstance(doc, dict) or doc.get("algorithm") != ALGORITHM:
        raise ChecksumError(f"{path}: expected an object with algorithm {ALGORITHM!r}", path)
    files = doc.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ChecksumError(f"{path}: 'files' must map file names to hex digests", path)
    return files


def verify_checksums(directory: str | os.PathLike, checksums: Mapping[str, str]) -> None:
    """Verify every ``{name: sha256}`` in ``directory``; the first mismatch raises, naming the file."""
    for name, digest in checksums.items():
        verify_file(Path(directory) / name, digest)

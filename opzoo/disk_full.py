"""A full disk (or quota) while writing is a one-line error naming the file, not a traceback."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Iterator

from .errors import OpzooError

_CODES = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFullError(OpzooError, OSError):
    """No space left while writing a file; the message names the file and what was kept."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-space error (an OSError, or safetensors' wrapped I/O error)."""
    if isinstance(exc, OSError) and exc.errno in _CODES:
        return True
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text or "StorageFull" in text


class WriteTracker:
    """Names the file being written (``tracker.path = ...``) for :func:`disk_full_as_error`."""

    def __init__(self) -> None:
        self.path: Path | None = None


@contextlib.contextmanager
def disk_full_as_error(what: str, kept: str) -> Iterator[WriteTracker]:
    """Turn an out-of-space error inside the block into DiskFullError:
    ``"disk full writing <file> (<what>): <kept>"``; other errors pass through."""
    tracker = WriteTracker()
    try:
        yield tracker
    except DiskFullError:
        raise
    except Exception as e:  # OSError, SafetensorError (not an OSError subclass), ...
        if not is_disk_full(e):
            raise
        where = tracker.path if tracker.path is not None else "?"
        free = _free_space(tracker.path)
        raise DiskFullError(f"disk full writing {where} ({what}{free}): {kept}") from None


def _free_space(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return ""
    return f"; {st.f_bavail * st.f_frsize / 2**20:.1f} MiB free there"

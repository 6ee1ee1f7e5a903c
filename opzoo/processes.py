"""Whether a process that left something behind (a lock, a temporary file) is still alive."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


__all__ = ["process_alive"]

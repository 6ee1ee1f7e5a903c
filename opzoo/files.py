"""Writing opzoo's own files: whole or not at all, never through a planted link, cleaning up after dead writers, and
JSON without NaN (:func:`strict_json`); reading JSON with a bound (:func:`read_json`, the one reader of every JSON
config and record); the one rule for a command's output directory (:func:`claim_output_dir`).

Every temporary name is ``.<target>.opzoo-tmp-<what>-<pid>@<host>-<random>`` in the target's directory (a file, a
staging directory of a save, a checkpoint being written): the name says which process owns it, so
:func:`clean_dead_temporaries`, the one cleanup after dead writers, removes only what a process on this host that no
longer runs left behind (and the ``.tmp-<what>-<pid>@<host>`` checkpoint directories of opzoo before issue 44). A temporary file is opened with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (a link or file planted at its name is
refused, never followed) and mode 0o666 less the umask, as any new file; it replaces the target with ``os.replace``,
which replaces a link at the target itself rather than writing through it.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import socket
from pathlib import Path
from typing import IO, Any, Iterator

TMP_MARK = ".opzoo-tmp-"
LEGACY_TMP = ".tmp-"  # checkpoint temporaries written before issue 44: cleaned, never written any more


def temporary_name(target: str | os.PathLike, what: str = "new") -> Path:
    """A fresh sibling name for ``target`` owned by this process (``what`` says what it holds: new, old, ...)."""
    target = Path(target)
    owner = f"{os.getpid()}@{socket.gethostname()}"
    return target.parent / f".{target.name}{TMP_MARK}{what}-{owner}-{secrets.token_hex(4)}"


def _open_new(path: Path, binary: bool) -> IO:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o666)  # the umask applies, as to any new file
    # text: UTF-8, and newline="" so that what is written is what lands (csv writes its own line ends)
    return os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8", "newline": ""}))


@contextlib.contextmanager
def atomic_writer(target: str | os.PathLike, binary: bool = False, durable: bool = False) -> Iterator[IO]:
    """``with atomic_writer(path) as f: f.write(...)``: ``path`` holds what was written when the block ends, or is
    unchanged when it raises. ``durable`` fsyncs before the rename (checkpoints, records a resume trusts)."""
    target = Path(target)
    tmp = temporary_name(target)
    f = _open_new(tmp, binary)
    try:
        with f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(target: str | os.PathLike, data: str | bytes, durable: bool = False) -> Path:
    """Write ``data`` (text as UTF-8) to ``target`` whole, or leave it unchanged; returns ``target``."""
    with atomic_writer(target, binary=isinstance(data, bytes), durable=durable) as f:
        f.write(data)
    return Path(target)


def new_file_mode(*paths: str | os.PathLike) -> None:
    """Give ``paths`` the mode of any new file (0o666 less the umask): a writer that creates files 0600 (safetensors,
    mkstemp) would keep them from the colleagues who read the user's other files. One rule for every file opzoo
    writes."""
    mask = os.umask(0)
    os.umask(mask)
    for path in paths:
        os.chmod(path, 0o666 & ~mask)


class NotRegularFile(OSError):
    """A path that names a FIFO, a device, a directory or a socket where a file's bytes are to be read."""


def open_regular(path: str | os.PathLike) -> IO[bytes]:
    """``path`` opened for reading, only if it is a regular file (links followed): a FIFO planted in its place would
    block the open forever, ``/dev/zero`` would read until memory runs out. Raises :class:`NotRegularFile`."""
    import fcntl
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a directory" if stat.S_ISDIR(mode) else "not a regular file")
            raise NotRegularFile(f"{path}: {kind}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~getattr(os, "O_NONBLOCK", 0))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


JSON_LIMIT = 128 * 2**20  # bytes: the largest JSON config or record read (a training record of ~10^6 trajectories)


def read_json(path: str | os.PathLike, what: str = "a JSON file", *, limit: int = JSON_LIMIT,
              follow_links: bool = True, error: type[Exception] | None = None) -> Any:
    """The JSON document at ``path`` (``what`` names it in messages), read only if it is a regular file of at most
    ``limit`` bytes (``follow_links=False``: a symbolic link in its place is refused too, for a record a process of
    opzoo wrote itself); any failure is one line of ``error`` (default :class:`opzoo.ConfigError`) naming the file: a
    6 GB file is refused before a byte is read, where reading it whole took twice its size in memory."""
    import json

    from .errors import ConfigError

    error = error or ConfigError
    if not follow_links and os.path.islink(path):
        raise error(f"{path}: a symbolic link where {what} belongs (to {os.readlink(path)}); opzoo wrote a file there "
                    f"and reads no other: restore it, or start over")
    try:
        with open_regular(path) as f:
            raw = read_bounded(f, path, what, limit=limit, error=error)
    except FileNotFoundError:
        raise error(f"{path}: no such file ({what})") from None
    except OSError as e:
        raise error(f"{path}: cannot be read as {what} ({e.strerror or e})") from None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid JSON ({e}): {what} cut short or damaged") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply to be {what}") from None


def read_bounded(f: IO[bytes], path: str | os.PathLike, what: str, *, limit: int = JSON_LIMIT,
                 error: type[Exception] | None = None) -> bytes:
    """The bytes of the open file ``f`` (of ``path``), refused in one line of ``error`` when it holds more than
    ``limit``: judged by its size before a byte is read, and by what the read returns (a file growing meanwhile)."""
    from .errors import ConfigError

    size = os.fstat(f.fileno()).st_size
    raw = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(raw) > limit:
        raise (error or ConfigError)(f"{path}: {max(size, len(raw)) / 2**20:.0f} MiB, larger than {what} can be "
                                     f"({limit / 2**20:.0f} MiB): not read; is it the file you meant?")
    return raw


def claim_output_dir(out: str | os.PathLike, owned, *, force: bool = False, flag: str = "--out",
                     what: str = "its output", advice: str = "pass --force to write beside them") -> Path:
    """The one rule for a command that writes into a directory: ``out`` may be new, or hold only files opzoo writes
    there (``owned(path)`` says which; temporaries of dead writers too); a directory holding any other file is refused
    before any work, naming them, unless ``force`` (even then no such file is removed, and one is replaced only where
    opzoo writes a file of that name). A symbolic link at ``out`` (or a file) is refused: the results would land in
    its target, or be lost after they were computed."""
    from .errors import OpzooError

    out = Path(out)
    if out.is_symlink():
        raise OpzooError(f"{flag} {out}: a symbolic link (to {os.readlink(out)}); name a real directory for {what}")
    if out.exists() and not out.is_dir():
        raise OpzooError(f"{flag} {out}: a file, not a directory; name a directory for {what}")
    parent = next((p for p in out.parents if p.exists() or p.is_symlink()), None)
    if parent is not None and not parent.is_dir():
        raise OpzooError(f"{flag} {out}: {parent} is not a directory")
    if out.is_dir() and not force:
        foreign = sorted(p.name for p in out.iterdir() if TMP_MARK not in p.name and not owned(p))
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OpzooError(f"{flag} {out} holds files opzoo did not write ({shown}); choose another directory, or "
                             f"{advice} (files opzoo did not write are never removed)")
    return out


def check_regular(path: str | os.PathLike) -> None:
    """:class:`NotRegularFile` unless ``path`` is a regular file (for readers that open it themselves)."""
    open_regular(path).close()


def _owner(name: str) -> tuple[int, str] | None:
    """``(pid, host)`` of a temporary name, or None when the name is not one of ours."""
    _, mark, rest = name.partition(TMP_MARK)
    if not mark:
        if not name.startswith(LEGACY_TMP):
            return None
        rest, at, host = name.rpartition("@")  # .tmp-<what>-<pid>@<host>, or without @<host> (older still)
        if not at:
            rest, host = name, socket.gethostname()
        pid = rest.rpartition("-")[2]
        return (int(pid), host) if pid.isdigit() else None
    parts = rest.split("-")  # what..., pid@host (a host name may hold dashes), random
    for i in range(len(parts) - 1, 0, -1):
        pid, at, host_head = parts[i].partition("@")
        if at and pid.isdigit():
            return int(pid), "-".join([host_head, *parts[i + 1:-1]])
    return None


def clean_dead_temporaries(directory: str | os.PathLike, target: str | None = None) -> list[Path]:
    """Remove the temporaries in ``directory`` (of ``target`` only, when given) whose writer, a process on this host,
    is gone; a live writer's, or another host's, are left alone. Returns what was removed."""
    from .processes import process_alive

    host, removed = socket.gethostname(), []
    for path in temporaries(directory, target):
        owner = _owner(path.name)
        if owner is None or owner[1] != host or process_alive(owner[0]):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def temporaries(directory: str | os.PathLike, target: str | None = None) -> list[Path]:
    """The temporaries in ``directory`` (of ``target`` only, when given), live or dead, by name."""
    directory = Path(directory)
    patterns = [f".{target}{TMP_MARK}*"] if target else [f".*{TMP_MARK}*", f"{LEGACY_TMP}*"]
    try:
        return sorted({p for pattern in patterns for p in directory.glob(pattern) if _owner(p.name) is not None})
    except OSError:
        return []


def move_aside(directory: str | os.PathLike, keep: tuple[str, ...] = ()) -> Path | None:
    """Move everything in ``directory`` except the names in ``keep`` into a new sibling ``<name>.replaced-<time>``
    (never deleting); returns it, or None when there was nothing to move."""
    import time

    directory = Path(directory)
    names = sorted(p.name for p in directory.iterdir() if p.name not in keep) if directory.is_dir() else []
    if not names:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = directory.parent / f"{directory.name}.replaced-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = directory.parent / f"{directory.name}.replaced-{stamp}-{n}"
    target.mkdir()
    for name in names:
        os.rename(directory / name, target / name)
    return target


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN or Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


__all__ = ["TMP_MARK", "temporary_name", "atomic_writer", "atomic_write", "clean_dead_temporaries", "move_aside",
           "strict_json"]

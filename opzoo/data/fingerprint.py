"""What identifies a data file's content, cheaply: its size and a SHA-256 over sampled blocks.

Hashing a 100 GB file on every run or eval is not an option, so :func:`content_hash` reads the whole
file only up to ``FULL_HASH_BYTES``; above that it hashes the size, the first and last
``EDGE_BYTES`` and ``SAMPLES`` blocks of ``BLOCK_BYTES`` spread evenly in between (about 6 MiB
read). A file rewritten with other values almost always changes in those blocks (HDF5 chunks and
arrays are spread over the file); one edited in a few bytes between two samples may not, which is the
price of not reading it all. The hash says which kind it is (``sha256:`` or ``sha256-sampled:``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

FULL_HASH_BYTES = 64 << 20
EDGE_BYTES = 1 << 20
BLOCK_BYTES = 64 << 10
SAMPLES = 64


def content_hash(data) -> str:
    """What identifies ``data``'s content: a file's ``sha256:<hex>`` (small) or ``sha256-sampled:<hex>`` (large; see
    the module doc). ``data`` is a path, or an opened :class:`~opzoo.data.TrajectorySource`; a dataset of several files
    (a directory, or a reader's :meth:`~opzoo.data.TrajectorySource.files`) is ``sha256-files:<hex>`` over each
    member's name (relative to the dataset) and content hash, so that an edit of any member changes it."""
    return _content(data, dataset_files(data))[0]


def _content(data, members: list[Path]) -> tuple[str, dict[str, str] | None]:
    """``(content hash, {member name: its hash})`` of ``data`` held in ``members``; the names are None for a
    dataset of one file (hashed as a file)."""
    if len(members) == 1 and members[0] == Path(_path_of(data)).expanduser().resolve():
        return _file_hash(members[0]), None
    root = dataset_root(data)
    hashes = {name: _file_hash(m) for name, m in sorted((_relative(m, root), m) for m in members)}
    h = hashlib.sha256(b"opzoo dataset files;")
    for name, digest in hashes.items():
        h.update(f"{name}\0{digest}\n".encode())
    return f"sha256-files:{h.hexdigest()}", hashes


def _path_of(data) -> str:
    return os.fspath(data.path if hasattr(data, "files") else data)


def dataset_root(data) -> Path:
    """The directory a dataset's members are named relative to: the dataset itself when it is a directory, else the
    directory of the file named."""
    p = Path(_path_of(data)).expanduser().resolve()
    return p if p.is_dir() else p.parent


def _relative(member: Path, root: Path) -> str:
    try:
        return member.relative_to(root).as_posix()
    except ValueError:  # a member outside the dataset's directory: named in full
        return member.as_posix()


def dataset_files(data) -> list[Path]:
    """Every file that holds ``data`` (a path, or an opened source: its reader's ``files()``), resolved; a path that is
    a directory lists every file under it (as :meth:`~opzoo.data.TrajectorySource.files` does). DataFormatError,
    naming the reader, when a member is missing or not a regular file."""
    from opzoo.data.errors import DataFormatError

    named = _path_of(data)
    where = f"{named}: the {getattr(data, 'layout', 'directory')} reader's files()"
    if hasattr(data, "files"):
        try:
            listed = data.files()
        except DataFormatError:
            raise
        except Exception as e:  # a plugin's reader: one line naming it, not a traceback
            raise DataFormatError(f"{where} raised {type(e).__name__}: {e}") from None
    else:
        listed = files_at(named)
    if not isinstance(listed, (list, tuple)) or not listed:
        raise DataFormatError(f"{where} named no file (it returns the files that hold the dataset)")
    out = []
    for m in listed:
        if not isinstance(m, (str, os.PathLike)):
            raise DataFormatError(f"{where} returned {type(m).__name__} {m!r}, not a path")
        p = Path(m).expanduser().resolve()
        if not p.is_file():
            raise DataFormatError(f"{where} names {os.fspath(m)}, which is "
                                  f"{'a directory' if p.is_dir() else 'missing'}: a member must be a regular file")
        out.append(p)
    return out


def files_at(path: str | os.PathLike) -> list[str]:
    """The files a path holds: the file itself, or every file under a directory, sorted, names that start with ``.``
    left out (with what is under them)."""
    if not os.path.isdir(path):
        return [os.fspath(path)]
    out = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.join(root, n) for n in sorted(names) if not n.startswith(".")]
    return out


def _file_hash(path: str | os.PathLike) -> str:
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= FULL_HASH_BYTES:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
            return f"sha256:{h.hexdigest()}"
        h.update(str(size).encode())
        offsets = [0] + [EDGE_BYTES + k * (size - 2 * EDGE_BYTES - BLOCK_BYTES) // (SAMPLES - 1)
                         for k in range(SAMPLES)] + [size - EDGE_BYTES]
        for offset in offsets:
            f.seek(offset)
            h.update(f.read(EDGE_BYTES if offset in (0, size - EDGE_BYTES) else BLOCK_BYTES))
    return f"sha256-sampled:{h.hexdigest()}"


TRAJECTORY_HASH = "t1:"  # the form of values_hash: its version, then 16 hex digits (64 bits)


def values_hash(trajectory) -> str:
    """``t1:<16 hex>``: SHA-256 of a trajectory's shape and its values as little-endian float32, truncated to 64 bits.
    "The same data" is the same float32 values in the same ``[*S, T, C]`` order: a copy in another layout, gzip'd, or
    stored in float64 (whose values cast to float32 are the same) hashes alike; values changed anywhere do not."""
    a = np.ascontiguousarray(np.asarray(trajectory, dtype="<f4"))
    h = hashlib.sha256(f"opzoo trajectory {list(a.shape)};".encode())
    h.update(a.tobytes())
    return TRAJECTORY_HASH + h.hexdigest()[:16]


def trajectory_hashes(dataset) -> list[str]:
    """:meth:`~opzoo.data.TrajectorySource.trajectory_hash` of every trajectory of a :class:`~opzoo.data.TrajectoryDataset`
    (its subset, in its order)."""
    return [dataset.source.trajectory_hash(i) for i in dataset.indices]


def generation_recipe(source) -> dict | None:
    """How an opzoo generator made the file of ``source`` (a :class:`~opzoo.data.TrajectorySource`), or None when no
    generator wrote it: ``{"generator", "generator_version", "seed", "params", "trajectory_shape"}``. Trajectory ``i``
    of two files with one recipe is the same trajectory (each is seeded by ``(seed, i)`` alone), even where another CPU
    or solver precision rounds its values differently, so their content hashes differ."""
    attrs, info = source.info.attrs, source.info
    if not attrs.get("generator") or attrs.get("seed") is None:
        return None
    return {"generator": str(attrs["generator"]), "generator_version": str(attrs.get("generator_version", "")),
            "seed": int(attrs["seed"]), "params": json.loads(json.dumps(info.params, sort_keys=True, default=str)),
            "trajectory_shape": [*map(int, info.spatial_shape), int(info.n_steps), len(info.fields)]}


def file_fingerprint(path: str | os.PathLike, source=None) -> dict:
    """What identifies a data file a run trains on: its resolved path, size, mtime, the shape and
    channels it is read as (``source``: its opened :class:`~opzoo.data.TrajectorySource`),
    :func:`content_hash`, and with ``source`` every trajectory's :func:`values_hash` (the file read once, whole:
    an edit of any trajectory, wherever it lies, is seen, where the sampled content hash may miss it)."""
    p = Path(path).expanduser().resolve()
    data = source if source is not None else p
    members = dataset_files(data)
    stats = [m.stat() for m in members]
    content, hashes = _content(data, members)
    out = {"path": str(p), "size": sum(st.st_size for st in stats), "mtime_ns": max(st.st_mtime_ns for st in stats),
           "content": content}
    if hashes is not None:
        root = dataset_root(data)
        sizes = {_relative(m, root): st.st_size for m, st in zip(members, stats)}
        out["files"] = {name: {"size": sizes[name], "content": digest} for name, digest in hashes.items()}
    if source is not None:
        out.update(layout=source.layout, shape=[int(n) for n in source.shape], fields=list(source.fields),
                   trajectories=[source.trajectory_hash(i) for i in range(len(source))])
    return out


def fingerprint_changes(old: dict, new: dict) -> list[str]:
    """What differs between two fingerprints of one file, in words (empty: the same data; a new mtime
    alone, the same bytes, is not a change)."""
    changes = []
    if old.get("shape") != new.get("shape"):
        o, n = old.get("shape") or [], new.get("shape") or []
        if o and n and o[0] != n[0] and o[1:] == n[1:]:
            changes.append(f"trajectory count {o[0]} -> {n[0]}")
        else:
            changes.append(f"shape [N, *S, T, C] {o} -> {n}")
    if old.get("fields") != new.get("fields"):
        changes.append(f"fields {old.get('fields')} -> {new.get('fields')}")
    if old.get("size") != new.get("size"):
        changes.append(f"size {old.get('size')} -> {new.get('size')} bytes")
    before, now = old.get("files"), new.get("files")
    if before is not None and now is not None and before != now:
        gone, added = sorted(set(before) - set(now)), sorted(set(now) - set(before))
        edited = sorted(n for n in set(before) & set(now) if before[n] != now[n])
        for what, names in (("file(s) gone", gone), ("file(s) added", added), ("file(s) edited", edited)):
            if names:
                changes.append(f"{what}: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}")
    if old.get("content") != new.get("content"):
        changes.append(f"content ({old.get('content', '?')[:23]}... -> {new.get('content', '?')[:23]}...)")
    before, now = old.get("trajectories"), new.get("trajectories")
    if before is not None and now is not None and before != now and len(before) == len(now):
        edited = [i for i, (a, b) in enumerate(zip(before, now)) if a != b]
        changes.append(f"the values of {len(edited)} trajectory(ies) ({', '.join(map(str, edited[:8]))}"
                       f"{', ...' if len(edited) > 8 else ''})")
    return changes


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name the same data: the same resolved path, or files (or directories) with the same content
    hash."""
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.resolve() == pb.resolve():
        return True
    if pa.is_dir() and pb.is_dir():
        return content_hash(pa) == content_hash(pb)
    if not (pa.is_file() and pb.is_file()) or pa.stat().st_size != pb.stat().st_size:
        return False
    return content_hash(pa) == content_hash(pb)


__all__ = ["content_hash", "dataset_files", "same_file", "file_fingerprint", "fingerprint_changes", "generation_recipe"]

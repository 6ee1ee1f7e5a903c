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


def content_hash(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of a small file, ``sha256-sampled:<hex>`` of a large one (see the module doc)."""
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
    st = p.stat()
    out = {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "content": content_hash(p)}
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
    if old.get("content") != new.get("content"):
        changes.append(f"content ({old.get('content', '?')[:23]}... -> {new.get('content', '?')[:23]}...)")
    before, now = old.get("trajectories"), new.get("trajectories")
    if before is not None and now is not None and before != now and len(before) == len(now):
        edited = [i for i, (a, b) in enumerate(zip(before, now)) if a != b]
        changes.append(f"the values of {len(edited)} trajectory(ies) ({', '.join(map(str, edited[:8]))}"
                       f"{', ...' if len(edited) > 8 else ''})")
    return changes


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name the same data: the same resolved path, or files with the same content hash."""
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.resolve() == pb.resolve():
        return True
    if not (pa.is_file() and pb.is_file()) or pa.stat().st_size != pb.stat().st_size:
        return False
    return content_hash(pa) == content_hash(pb)


__all__ = ["content_hash", "same_file", "file_fingerprint", "fingerprint_changes", "generation_recipe"]

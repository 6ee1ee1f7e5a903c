"""``opzoo data inspect``: a readable summary of a trajectory file."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from opzoo.data.errors import describe_shape
from opzoo.data.readers import TrajectorySource, open_source


@dataclass
class FieldStats:
    """Statistics of one channel over the samples read."""

    name: str
    min: float
    max: float
    mean: float
    std: float
    non_finite: int


def field_statistics(source: TrajectorySource, max_samples: int | None = None,
                     bad_samples: list[tuple[int, int, int]] | None = None) -> tuple[list[FieldStats], int]:
    """Per-channel min/max/mean/std and NaN/Inf count, streaming one trajectory at a time.

    Reads samples evenly spread over the file when ``max_samples`` < N. Returns (stats, samples read).
    ``bad_samples``, when given, receives ``(sample, NaN/Inf count, first bad frame)`` of each
    trajectory read that holds non-finite values.
    """
    n = source.n_samples
    if max_samples is None or max_samples >= n:
        picks = np.arange(n)
    else:
        picks = np.linspace(0, n - 1, max_samples).round().astype(int)
    c = source.n_channels
    count = np.zeros(c)
    total = np.zeros(c)
    total_sq = np.zeros(c)
    low = np.full(c, np.inf)
    high = np.full(c, -np.inf)
    bad = np.zeros(c, dtype=np.int64)
    check, source.check_finite = source.check_finite, False
    try:
        for sample in picks:
            values = source.read(int(sample)).reshape(-1, c).astype(np.float64)
            finite = np.isfinite(values)
            bad += (~finite).sum(axis=0)
            if bad_samples is not None and not finite.all():
                per_frame = ~finite.reshape(-1, source.n_steps, c).all(axis=(0, 2))  # rows were [*S, T, C]
                bad_samples.append((int(sample), int((~finite).sum()), int(np.flatnonzero(per_frame)[0])))
            clean = np.where(finite, values, 0.0)
            count += finite.sum(axis=0)
            total += clean.sum(axis=0)
            total_sq += (clean**2).sum(axis=0)
            low = np.minimum(low, np.where(finite, values, np.inf).min(axis=0))
            high = np.maximum(high, np.where(finite, values, -np.inf).max(axis=0))
    finally:
        source.check_finite = check
    mean = total / np.maximum(count, 1)
    std = np.sqrt(np.maximum(total_sq / np.maximum(count, 1) - mean**2, 0.0))
    stats = [FieldStats(name, low[i], high[i], mean[i], std[i], int(bad[i])) for i, name in enumerate(source.fields)]
    return stats, len(picks)


def describe_size(source) -> str:
    """``12.3 MiB``, or ``12.3 MiB in 40 files`` for a dataset of several (its reader's ``files()``)."""
    from opzoo.data.fingerprint import dataset_files

    members = dataset_files(source)
    size = f"{sum(m.stat().st_size for m in members) / 2**20:.1f} MiB"
    return size if len(members) == 1 and not os.path.isdir(source.path) else f"{size} in {len(members)} files"


def stored_axes(source) -> str:
    """``stored as [N, T, C, H, W], `` where a reader keeps the stored order in ``source.axes`` (the core's array
    readers), else nothing: ``SourceInfo.axis_note`` alone says how the order was decided."""
    axes = getattr(source, "axes", None)
    return f"stored as [{', '.join(axes)}], " if axes else ""


def inspect_file(path: str | os.PathLike, layout: str | None = None, max_samples: int | None = None,
                 fields: list[str] | None = None) -> str:
    """The text ``opzoo data inspect`` prints: layout, shapes, fields, time steps and statistics."""
    with open_source(path, layout=layout, check_finite=False, **({"fields": fields} if fields else {})) as source:
        info = source.info
        axes = ["N", *(d.upper() for d in ["x", "y", "z"][: len(info.spatial_shape)]), "T", "C"]
        lines = [
            f"file:     {source.path} ({describe_size(source)})",
            f"layout:   {info.layout}",
            f"shape:    [{', '.join(axes)}] = {describe_shape(info.shape)}",
            *([f"axes:     {stored_axes(source)}{info.axis_note}"] if info.axis_note else []),
            f"fields:   {', '.join(info.fields)}",
            f"time:     T = {info.n_steps} frames"
            + (f", dt = {info.dt:g}" if info.dt is not None else "")
            + (f", t = {info.times[0]:g} .. {info.times[-1]:g}" if info.times is not None and len(info.times) else ""),
        ]
        if info.pde:
            lines.append(f"pde:      {info.pde}")
        if info.params:
            lines.append(f"params:   {info.params}")
        unstated = "not stated by the file (a model assumes its own: `opzoo fit MODEL --data FILE` says which)"
        lines.append(f"boundary: {info.boundary or unstated}")
        for key in ("generator", "generator_version", "seed"):
            if key in info.attrs:
                value = info.attrs[key]
                lines.append(f"{key}: {value.decode() if isinstance(value, bytes) else value}")
        for name, values in info.coords.items():
            values = np.asarray(values).ravel()
            if values.size:
                lines.append(f"coord {name}:  {values.size} points in [{values.min():g}, {values.max():g}]")
        bad_samples: list[tuple[int, int, int]] = []
        stats, read = field_statistics(source, max_samples, bad_samples)
        lines.append(f"statistics over {read} of {info.n_samples} samples:")
        lines.append(f"  {'field':<16}{'min':>12}{'max':>12}{'mean':>12}{'std':>12}{'NaN/Inf':>10}")
        for s in stats:
            lines.append(f"  {s.name:<16}{s.min:>12.4g}{s.max:>12.4g}{s.mean:>12.4g}{s.std:>12.4g}{s.non_finite:>10d}")
        if bad_samples:
            lines.append(f"trajectories with NaN/Inf values: {len(bad_samples)} of the {read} read")
            lines.extend(f"  trajectory {i}: {n} NaN/Inf value(s), first in frame {f}" for i, n, f in bad_samples)
    return "\n".join(lines)

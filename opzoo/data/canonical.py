"""The canonical opzoo trajectory file: one float32 dataset ``data`` shaped ``[N, *S, T, C]``.

This is the layout of DPOT's processed files plus metadata attributes on the root group:

==================  ===========================================================================
``fields``          C channel names
``pde``             short PDE name, e.g. ``"navier-stokes-vorticity"``
``params``          JSON object with the PDE and solver parameters
``dt``              time between recorded frames
``time``            ``[T]`` times of the recorded frames
``spatial_dims``    names of the S spatial axes, e.g. ``["x", "y"]``
``coord_<name>``    1-D coordinates of each spatial axis (cell centres or nodes)
``generator``,      which opzoo generator wrote the file, its version and the seed
``generator_version``, ``seed``
``opzoo_layout``    layout version (1)
==================  ===========================================================================

Files are written atomically: into a temporary file in the target directory, renamed over the
target only once every trajectory is written. A failure leaves no partial file behind.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import h5py
import numpy as np

from opzoo.data.errors import DataFormatError, describe_shape
from opzoo.disk_full import DiskFullError, is_disk_full
from opzoo.files import clean_dead_temporaries, new_file_mode, temporary_name

LAYOUT_VERSION = 1
DATA_KEY = "data"
#: Target bytes per HDF5 chunk: large enough for fast sequential reads, small enough that reading
#: one training window does not pull a whole long trajectory.
CHUNK_BYTES = 1 << 20


def chunk_shape(spatial_shape: Sequence[int], n_steps: int, n_channels: int) -> tuple[int, ...]:
    """HDF5 chunk for ``data``: one sample, all of space and channels, as many frames as fit 1 MiB."""
    frame_bytes = 4 * n_channels * int(np.prod(spatial_shape))
    frames = int(max(1, min(n_steps, CHUNK_BYTES // max(frame_bytes, 1))))
    return (1, *spatial_shape, frames, n_channels)


class CanonicalWriter:
    """Write ``N`` trajectories ``[*S, T, C]`` block by block into a canonical file.

    Usage::

        with CanonicalWriter(path, n, (64, 64), 50, ["vorticity"], pde="ns", dt=1.0) as w:
            for block in blocks:        # block: [B, *S, T, C]
                w.append(block)

    The file appears at ``path`` only when the ``with`` block exits normally and all ``N``
    trajectories were written; otherwise the temporary file is removed. A directory without room for the
    ``N`` trajectories is refused before anything is written, and a disk that fills up while writing is a
    :class:`~opzoo.disk_full.DiskFullError` naming the file, with the temporary file removed.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        n_samples: int,
        spatial_shape: Sequence[int],
        n_steps: int,
        fields: Sequence[str],
        *,
        pde: str = "",
        params: Mapping[str, Any] | None = None,
        dt: float | None = None,
        times: Sequence[float] | None = None,
        spatial_dims: Sequence[str] | None = None,
        coords: Mapping[str, Sequence[float]] | None = None,
        generator: str | None = None,
        generator_version: str | None = None,
        seed: int | None = None,
        attrs: Mapping[str, Any] | None = None,
        overwrite: bool = True,
    ):
        self.path = os.fspath(path)
        self.shape = (int(n_samples), *map(int, spatial_shape), int(n_steps), len(fields))
        if not 1 <= len(spatial_shape) <= 3:
            raise ValueError(f"{self.path}: spatial_shape {tuple(spatial_shape)} must have 1 to 3 dims")
        if not overwrite and os.path.exists(self.path):
            raise FileExistsError(f"{self.path}: exists (pass overwrite=True to replace it)")
        self.overwrite = overwrite
        self.count = 0
        self._meta = dict(
            fields=list(fields),
            pde=pde,
            params=dict(params or {}),
            dt=dt,
            times=times,
            spatial_dims=list(spatial_dims or ["x", "y", "z"][: len(spatial_shape)]),
            coords=dict(coords or {}),
            generator=generator,
            generator_version=generator_version,
            seed=seed,
            attrs=dict(attrs or {}),
        )
        self._tmp: str | None = None
        self._file: h5py.File | None = None
        self._data: h5py.Dataset | None = None

    def __enter__(self) -> "CanonicalWriter":
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        clean_dead_temporaries(directory, target=os.path.basename(self.path))  # what killed writers left
        self._check_room(directory)
        self._tmp = str(temporary_name(os.path.join(directory, os.path.basename(self.path))))
        try:
            # A fresh name: never an existing file or a planted link. No chunk cache: each append writes its whole
            # chunks at once, so a full disk fails that write, and HDF5 can still close the file (with dirty chunks
            # cached, closing after a failed write crashes the interpreter).
            self._file = h5py.File(self._tmp, "w-", rdcc_nbytes=0)
            self._data = self._file.create_dataset(
                DATA_KEY,
                shape=self.shape,
                dtype="float32",
                chunks=chunk_shape(self.shape[1:-2], self.shape[-2], self.shape[-1]),
            )
            write_attrs(self._file, **self._meta)
        except BaseException:
            self._abort()
            raise
        return self

    def append(self, block) -> None:
        """Write the next ``B`` trajectories; ``block`` is ``[B, *S, T, C]`` (numpy or torch)."""
        if hasattr(block, "detach"):
            block = block.detach().to("cpu").numpy()
        block = np.asarray(block, dtype=np.float32)
        if block.shape[1:] != self.shape[1:]:
            raise DataFormatError(
                f"{self.path}: key '{DATA_KEY}': block shaped {describe_shape(block.shape)}, "
                f"expected [B, {describe_shape(self.shape[1:])[1:]}"
            )
        if self.count + block.shape[0] > self.shape[0]:
            raise DataFormatError(
                f"{self.path}: key '{DATA_KEY}': writing {block.shape[0]} more trajectories after "
                f"{self.count} exceeds N = {self.shape[0]}"
            )
        if not np.isfinite(block).all():
            bad = sorted({self.count + int(i) for i in np.argwhere(~np.isfinite(block))[:, 0]})
            raise DataFormatError(
                f"{self.path}: key '{DATA_KEY}': refusing to write NaN/Inf values (trajectories {bad})"
            )
        try:
            self._data[self.count : self.count + block.shape[0]] = block
        except Exception as e:
            if not is_disk_full(e):
                raise
            self._abort()
            raise self._disk_full(f"trajectories {self.count}-{self.count + block.shape[0] - 1} of {self.shape[0]}") \
                from None
        self.count += block.shape[0]

    def _check_room(self, directory: str) -> None:
        """DiskFullError, before anything is written, when ``directory`` has no room for the data."""
        need = 4 * int(np.prod(self.shape, dtype=np.int64))
        st = os.statvfs(directory)
        free = st.f_bavail * st.f_frsize
        if need > free:
            raise DiskFullError(f"not enough space to write {self.path}: {self.shape[0]} trajectories of "
                                f"{describe_shape(self.shape[1:])} float32 need {need / 2**20:.1f} MiB, "
                                f"{free / 2**20:.1f} MiB free there; nothing was written: free space or write "
                                "elsewhere")

    def _disk_full(self, what: str) -> DiskFullError:
        st = os.statvfs(os.path.dirname(os.path.abspath(self.path)))
        return DiskFullError(f"disk full writing {self.path} ({what}; {st.f_bavail * st.f_frsize / 2**20:.1f} MiB "
                             "free there): nothing was saved and the temporary file is removed; free space or write "
                             "elsewhere")

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._abort()
            return
        if self.count != self.shape[0]:
            self._abort()
            raise DataFormatError(
                f"{self.path}: only {self.count} of {self.shape[0]} trajectories were written; "
                "nothing was saved"
            )
        try:
            self._file.close()
        except Exception as e:
            if not is_disk_full(e):
                raise
            self._abort()
            raise self._disk_full("closing the file") from None
        self._file = None
        if not self.overwrite and os.path.exists(self.path):
            os.unlink(self._tmp)
            raise FileExistsError(f"{self.path}: appeared while writing; not replaced")
        new_file_mode(self._tmp)
        os.replace(self._tmp, self.path)
        self._tmp = None

    def _abort(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except Exception:
                pass
            self._file = None
        if self._tmp is not None and os.path.exists(self._tmp):
            os.unlink(self._tmp)
        self._tmp = None


def write_attrs(
    f: h5py.File,
    *,
    fields: Sequence[str],
    pde: str = "",
    params: Mapping[str, Any] | None = None,
    dt: float | None = None,
    times: Sequence[float] | None = None,
    spatial_dims: Sequence[str] = (),
    coords: Mapping[str, Sequence[float]] | None = None,
    generator: str | None = None,
    generator_version: str | None = None,
    seed: int | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> None:
    """Write the canonical root attributes (see module docstring)."""
    f.attrs["opzoo_layout"] = LAYOUT_VERSION
    f.attrs["fields"] = [str(c) for c in fields]
    f.attrs["pde"] = pde
    f.attrs["params"] = json.dumps(dict(params or {}), sort_keys=True, default=_json_default)
    if dt is not None:
        f.attrs["dt"] = float(dt)
    if times is not None:
        f.attrs["time"] = np.asarray(times, dtype=np.float64)
    f.attrs["spatial_dims"] = [str(d) for d in spatial_dims]
    for name, values in (coords or {}).items():
        f.attrs[f"coord_{name}"] = np.asarray(values, dtype=np.float64)
    if generator is not None:
        f.attrs["generator"] = generator
    if generator_version is not None:
        f.attrs["generator_version"] = generator_version
    if seed is not None:
        f.attrs["seed"] = int(seed)
    for key, value in (attrs or {}).items():
        f.attrs[key] = value


def write_canonical(path: str | os.PathLike, data, fields: Sequence[str], **meta) -> None:
    """Write an in-memory ``[N, *S, T, C]`` array as a canonical file (atomically).

    ``meta`` takes the keyword arguments of :class:`CanonicalWriter` (``pde``, ``dt``, ...).
    For data that does not fit in memory use :class:`CanonicalWriter` directly.
    """
    if hasattr(data, "detach"):
        data = data.detach().to("cpu").numpy()
    data = np.asarray(data, dtype=np.float32)
    if data.ndim not in (4, 5, 6):
        raise DataFormatError(
            f"{os.fspath(path)}: data shaped {describe_shape(data.shape)}; expected [N, *S, T, C] "
            "with 1 to 3 spatial dims"
        )
    with CanonicalWriter(path, data.shape[0], data.shape[1:-2], data.shape[-2], fields, **meta) as w:
        w.append(data)


def _json_default(value):
    if isinstance(value, (np.generic,)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")

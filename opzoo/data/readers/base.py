"""The common interface of every reader: a lazily read collection of trajectories.

Whatever the layout on disk, a reader presents its file as ``N`` trajectories, each a float32 array
shaped ``[*S, T, C]`` (channels-last, time before channels). Nothing is read at open time except
metadata; ``read`` fetches one window of frames from one trajectory.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from opzoo.data.errors import DataFormatError, NonFiniteDataError, describe_shape


@dataclass
class SourceInfo:
    """Metadata of a trajectory collection (everything except the values).

    ``spatial_shape`` is ``S``; ``n_steps`` is ``T``; ``fields`` has ``C`` names.
    ``coords`` maps a spatial axis name to its 1-D coordinate array (may be empty).
    ``times`` is the ``[T]`` array of frame times when the file records them, else ``None``.
    """

    layout: str
    n_samples: int
    spatial_shape: tuple[int, ...]
    n_steps: int
    fields: list[str]
    dt: float | None = None
    times: np.ndarray | None = None
    pde: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    coords: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    boundary: str | None = None  # the boundary conditions as the file states them (None: it does not say)
    # each spatial axis's boundary in The Well's words: "periodic", "wall", "open", or "wall/open" (before/after);
    # None: the file does not say per axis
    axis_boundaries: tuple[str, ...] | None = None
    axis_note: str = ""  # how the stored axes' order was decided (readers.axes), for `opzoo data inspect`

    @property
    def periodic(self) -> bool | None:
        """Whether the file states periodic boundaries on every axis (True), another boundary (False), or
        nothing (None)."""
        if not self.boundary:
            return None
        return all(part.strip().lower().startswith("periodic") for part in self.boundary.split(";"))

    @property
    def shape(self) -> tuple[int, ...]:
        """``(N, *S, T, C)``."""
        return (self.n_samples, *self.spatial_shape, self.n_steps, len(self.fields))


MAX_SAMPLES = 10**8  # trajectories in one file (a PDE dataset holds at most millions)


def checked_info(info: Any, source: "TrajectorySource") -> SourceInfo:
    """A reader's :class:`SourceInfo`, its counts checked (positive whole numbers, at most :data:`MAX_SAMPLES`
    trajectories): a reader that declares 10^12 samples is refused here, in one line, as the core's readers refuse a
    file that declares more than it holds."""
    where = f"{source.path}: the {source.layout} reader"
    if not isinstance(info, SourceInfo):
        raise DataFormatError(f"{where} described the file with a {type(info).__name__}, not an opzoo SourceInfo")

    def whole(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1

    if not whole(info.n_samples) or info.n_samples > MAX_SAMPLES:
        raise DataFormatError(f"{where} declares {info.n_samples!r} trajectories; a file holds 1 to {MAX_SAMPLES:,}")
    if not whole(info.n_steps) or not isinstance(info.spatial_shape, (tuple, list)) or \
            not all(whole(n) for n in info.spatial_shape) or not info.fields:
        raise DataFormatError(f"{where} declares frames {info.n_steps!r}, grid {info.spatial_shape!r} and fields "
                              f"{info.fields!r}: not a trajectory shape")
    return info


def open_h5(path: str | os.PathLike, audit: bool = True) -> h5py.File:
    """Open an HDF5 file read-only, turning h5py's errors for bad files into DataFormatError; with
    ``audit`` (:func:`opzoo.data.readers.h5_audit.audit_file`) a file that reaches outside itself or
    would serve fill values is refused before anything is read."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        with open(path, "rb") as raw:
            head = raw.read(128)
        hint = "the file is truncated, corrupt or not HDF5"
        if head.startswith(b"MATLAB 5.0"):
            hint = "it is a MATLAB v5 .mat file, not v7.3 (HDF5); convert it with scipy.io.loadmat first"
        raise DataFormatError(f"{path}: cannot be opened as HDF5 ({exc}); {hint}") from exc
    if audit:
        from opzoo.data.readers.h5_audit import audit_file

        try:
            audit_file(f, path)
        except BaseException:
            f.close()
            raise
    return f


class TrajectorySource(abc.ABC):
    """A read-only view of one file as ``N`` trajectories shaped ``[*S, T, C]``.

    The protocol a reader implements (docs/plugins.md, "A reader"):

    - ``_h5() -> handle``: opens the file once per process and returns what ``_validate`` and ``_read`` receive as
      their first argument. The base class opens HDF5 read-only (``h5py.File``, audited) and keeps it in
      ``self._file``; a reader of another format overrides it, keeping its own handle (an ``np.memmap``, an open file)
      in ``self._file`` and reopening it when ``self._pid != os.getpid()`` (a source is pickled for DataLoader
      workers without ``self._file``).
    - ``_validate(handle) -> SourceInfo``: checks the file and says what it holds; called once, by ``__init__``.
    - ``_read(handle, sample, t_start, t_stop) -> array [*S, t, C]``: the frames asked for (indices already checked);
      the base class checks the shape, the values' finiteness, maps and fills channels.
    - ``close()`` closes ``self._file`` if it has a ``close`` method; override it only when a handle needs more.
    - ``SourceInfo.axis_note``: how the stored axes' order was decided, printed by ``opzoo data inspect``; a reader
      that keeps the stored order as ``self.axes`` (a string such as ``"NTCHW"``) has it printed too.
    - ``files() -> [path, ...]``: every file that holds the dataset (default: the file named, or every file under a
      directory); fingerprints, training records and ``opzoo data inspect``'s size cover all of them. A reader whose
      dataset spans several files (a sidecar naming frame files) returns them all.
    - ``reads_directories`` / ``claims_directory(path)``: a reader of a directory says so; a directory is a dataset
      when such a reader claims it (by default: its name ends in one of the reader's ``suffixes``), or ``--layout``
      names that reader.
    """

    layout: str = ""
    #: One line saying which keys and shapes this layout needs (used in error messages).
    expects: str = ""
    #: File-name endings that are this layout's alone (a format of its own, not HDF5: ``.npy``); empty for an HDF5
    #: layout, told by :meth:`detect` on the open file. A reader of another format overrides ``_h5`` to open its file.
    suffixes: tuple[str, ...] = ()
    #: Whether a dataset of this layout is a directory (of frame files, shards, ...), not one file.
    reads_directories: bool = False

    def __init__(self, path: str | os.PathLike, check_finite: bool = True):
        self.path = os.fspath(path)
        self.check_finite = check_finite
        self._file: h5py.File | None = None
        self._pid: int | None = None
        self._stamp = _stat_stamp(self.path)  # size and mtime when opened: a change under a run is refused
        self.info: SourceInfo = checked_info(self._guarded(self._validate, "opening", self._h5), self)
        self._all_fields = list(self.info.fields)  # the file's own channels, in the file's order
        self._file_spatial = tuple(self.info.spatial_shape)  # the file's own grid
        self._plan: list | None = None  # set by map_fields: each channel read, an Expression of the file's or a fill
        self._transpose = False

    def _guarded(self, hook, doing: str, h5, *args):
        """``hook(h5(), *args)``; for a plugin's reader under its deadline, its failure one line naming its package
        (:mod:`opzoo.registry.plugin_calls`): a reader's bug must not take a command down with a traceback."""
        from opzoo.registry.plugin_calls import PluginCallError, call_plugin, is_plugins, plugin_label

        if not is_plugins("reader", self.layout):
            return hook(h5(), *args)
        try:
            return call_plugin(hook, h5(), *args, what=plugin_label("reader", self.layout))
        except PluginCallError as e:
            raise DataFormatError(f"{self.path}: {doing} failed: {e}") from None

    # -- subclass hooks -------------------------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def detect(cls, f: h5py.File) -> bool:
        """Whether the file looks like it is meant to be in this layout (keys present)."""

    @classmethod
    def doubt(cls, f: h5py.File, path: str) -> str | None:
        """Why a file that ``detect`` matched may still not be in this layout (None: no doubt); detection
        refuses such a file and asks for the layout by name rather than guess."""
        return None

    @abc.abstractmethod
    def _validate(self, f: h5py.File) -> SourceInfo:
        """Check keys, ranks and shapes; raise DataFormatError naming what is wrong."""

    @abc.abstractmethod
    def _read(self, f: h5py.File, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        """Frames ``t_start:t_stop`` of trajectory ``sample`` -> ``[*S, t, C]``."""

    def _key_of(self, sample: int) -> str:
        """The HDF5 key(s) a sample is read from, for error messages."""
        return "data"

    # -- public ---------------------------------------------------------------------------------
    @property
    def n_samples(self) -> int:
        return self.info.n_samples

    @property
    def n_steps(self) -> int:
        return self.info.n_steps

    @property
    def spatial_shape(self) -> tuple[int, ...]:
        return self.info.spatial_shape

    @property
    def fields(self) -> list[str]:
        return self.info.fields

    @property
    def n_channels(self) -> int:
        return len(self.info.fields)

    @property
    def shape(self) -> tuple[int, ...]:
        """``(N, *S, T, C)``."""
        return self.info.shape

    def __len__(self) -> int:
        return self.info.n_samples

    @property
    def selected_channels(self) -> bool:
        """Whether :meth:`map_fields` (or :meth:`select_channels`) chose the channels read."""
        return self._plan is not None

    @property
    def own_fields(self) -> list[str]:
        """The file's own channels, in the file's order (whatever a map reads from them)."""
        return list(self._all_fields)

    @property
    def present(self) -> list[bool]:
        """Per channel read: True where it comes from the file, False where it is a fill value (a field the file
        lacks, read as the value a model was trained with)."""
        if self._plan is None:
            return [True] * len(self.info.fields)
        return [not isinstance(step, float) for step in self._plan]

    @property
    def fills(self) -> list[float | None]:
        """Per channel read: its fill value, or None where it comes from the file."""
        if self._plan is None:
            return [None] * len(self.info.fields)
        return [step if isinstance(step, float) else None for step in self._plan]

    def map_fields(self, plan: "list[tuple[str, Any]]", transpose: bool = False) -> None:
        """Read the channels ``plan`` names, in its order: each ``(name, how)`` with ``how`` an
        :class:`opzoo.registry.contract.Expression` of the file's channels (a channel by its name, ``a / b``,
        ``a - 2.5``, ...) or a float (a field the file lacks, read as that value everywhere). ``transpose``: the two
        spatial axes are swapped (H <-> W) as a model's upstream read the file. ``fields``, ``spatial_shape`` and
        every later :meth:`read` follow; a content hash still reads the file as it is. Refuses (naming the file) a
        name the file lacks or a transpose of data that is not 2-D."""
        from opzoo.registry.contract import Expression

        have = self._all_fields
        if len(set(have)) != len(have):
            raise DataFormatError(f"{self.path}: field names must be unique to be matched by name; the file has {have}")
        names = [name for name, _ in plan]
        if len(set(names)) != len(names):
            raise DataFormatError(f"{self.path}: the fields to read name one twice: {names}")
        steps: list = []
        for name, how in plan:
            if isinstance(how, Expression):
                lacking = [n for n in how.names if n not in have]
                if lacking:
                    raise DataFormatError(f"{self.path}: field {name} is read as {how.text}, but the file has no "
                                          f"{', '.join(lacking)} (it has {', '.join(have)})")
                steps.append(how)
            else:
                steps.append(float(how))
        spatial = self._file_spatial
        if transpose and len(spatial) != 2:
            raise DataFormatError(f"{self.path}: a transpose of the grid swaps two axes, but the data is "
                                  f"{len(spatial)}-D {list(spatial)}")
        self._plan, self._transpose = steps, bool(transpose)
        self.info.fields = names
        self.info.spatial_shape = tuple(reversed(spatial)) if transpose else tuple(spatial)

    def select_channels(self, names: list[str] | tuple[str, ...], fill: float | None = None) -> list[str]:
        """Read only the channels ``names``, in that order, matched by name (never by position): a file
        with a model's fields in another order is reordered. A name the file lacks is refused, naming it, unless
        ``fill`` is given (a model trained with missing fields so filled): that channel then reads as ``fill``
        everywhere. ``fields`` and every later :meth:`read` follow the selection. Returns the names filled."""
        from opzoo.registry.contract import Expression

        have = self._all_fields
        missing = [n for n in names if n not in have]
        if missing and (fill is None or len(missing) == len(names)):
            raise DataFormatError(f"{self.path}: the model needs field(s) {', '.join(missing)}, which the file does "
                                  f"not have (it has {', '.join(have)}); fields are matched by name")
        if len(set(names)) != len(names) or len(set(have)) != len(have):
            raise DataFormatError(f"{self.path}: field names must be unique to be matched by name; the file has "
                                  f"{have}, the model asks for {list(names)}")
        self.map_fields([(n, Expression(n, a=n) if n in have else float(fill)) for n in names])
        return missing

    def _mapped(self, window: np.ndarray) -> np.ndarray:
        """``window [*S_file, t, C_file]`` -> the channels of the plan (``[*S, t, C]``, transposed if asked)."""
        if self._transpose:
            window = np.swapaxes(window, 0, 1)
        have = self._all_fields
        if all(not isinstance(s, float) and not s.constant and s.op is None and not s.negate and s.func is None
               for s in self._plan):
            return window[..., [have.index(s.a) for s in self._plan]]
        window = np.asarray(window, dtype=np.float32)
        out = np.empty((*window.shape[:-1], len(self._plan)), dtype=np.float32)
        for j, step in enumerate(self._plan):
            out[..., j] = step if isinstance(step, float) else evaluate(step, window, have)
        return out

    @property
    def file_spatial(self) -> tuple[int, ...]:
        """The file's own grid, whatever a map reads (a transposed one's is the other way round)."""
        return tuple(self._file_spatial)

    @property
    def transposed(self) -> bool:
        return self._transpose

    def file_channels(self) -> tuple[list[tuple[str, int]], list[str]]:
        """``([(file field, channel it is read into)], left)`` in the file's field order: the file's fields a read
        channel holds (read as the field itself, or as an invertible expression of it: ``-a``, ``a + 2.5``, ``a / 3``,
        ``log10(a)``),
        and the channels that hold no field of the file (an expression of two fields, a fill value), by name."""
        if self._plan is None:
            return [(f, j) for j, f in enumerate(self._all_fields)], []
        found: dict[str, int] = {}
        left: list[str] = []
        for j, (name, step) in enumerate(zip(self.info.fields, self._plan)):
            if isinstance(step, float) or step.constant or step.b is not None or step.a in found or \
                    (step.op in ("*", "/") and not step.number):
                left.append(name)
            else:
                found[step.a] = j
        return [(f, found[f]) for f in self._all_fields if f in found], left

    def to_file_frame(self, frames):
        """Frames as this source reads them (``[..., *S, t, C]``, a tensor: the map's channels and orientation) back
        in the file's own orientation and field order (:meth:`file_channels`): ``(frames [..., *S_file, t, C'],
        names, left)``. Without a map: the file's own channels as they are."""
        import torch

        channels, left = self.file_channels()
        if self._plan is None:
            return frames[..., :len(channels)], [f for f, _ in channels], []
        if self._transpose:
            frames = frames.transpose(-4, -3)  # [..., H, W, t, C]: the grid's two axes back
        out = []
        for _, j in channels:
            value, step = frames[..., j], self._plan[j]
            inverse = {"+": lambda v: v - step.number, "-": lambda v: v + step.number,
                       "*": lambda v: v / step.number, "/": lambda v: v * step.number}.get(step.op, lambda v: v)
            if step.func == "log10":
                inverse = lambda v: torch.pow(10.0, v)  # noqa: E731
            value = inverse(value)
            out.append(-value if step.negate else value)
        names = [f for f, _ in channels]
        return (torch.stack(out, dim=-1) if out else frames[..., :0]), names, left

    def read(self, sample: int, t_start: int = 0, t_stop: int | None = None) -> np.ndarray:
        """Frames ``t_start:t_stop`` of trajectory ``sample`` as float32 ``[*S, t, C]``.

        Raises NonFiniteDataError (naming file, key, sample and frames) if the window holds NaN or
        Inf and ``check_finite`` is on.
        """
        n, steps = self.info.n_samples, self.info.n_steps
        if not 0 <= sample < n:
            raise IndexError(f"{self.path}: sample {sample} out of range [0, {n})")
        t_stop = steps if t_stop is None else t_stop
        if not 0 <= t_start < t_stop <= steps:
            raise IndexError(f"{self.path}: frames {t_start}:{t_stop} out of range [0, {steps}]")
        now = _stat_stamp(self.path)
        if now != self._stamp:
            raise DataFormatError(f"{self.path}: the file changed while it was being read (size, mtime {self._stamp} -> "
                                  f"{now}); nothing more is read from it. Restore the file, or start again with the "
                                  f"new one")
        try:
            window = self._guarded(self._read, f"reading sample {sample}", self._h5, sample, t_start, t_stop)
            if self._plan is not None:
                window = self._mapped(window)
        except OSError as exc:
            raise DataFormatError(
                f"{self.path}: key '{self._key_of(sample)}': reading sample {sample} "
                f"frames {t_start}:{t_stop} failed ({exc}); the file is truncated or corrupt"
            ) from exc
        try:
            window = np.asarray(window, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise DataFormatError(f"{self.path}: the {self.layout} reader returned {type(window).__name__}, not an "
                                  f"array of numbers, for sample {sample} ({' '.join(str(exc).split())[:120]})") from None
        # the plan's channels and grid, or (a content hash reads without it) the file's own
        mapped = self._plan is not None
        channels = len(self._plan) if mapped else len(self._all_fields)
        spatial = self.info.spatial_shape if mapped else self._file_spatial
        expected = (*spatial, t_stop - t_start, channels)
        if window.shape != expected:  # a reader bug, not a user error; fail loudly anyway
            raise DataFormatError(
                f"{self.path}: key '{self._key_of(sample)}': read {describe_shape(window.shape)}, "
                f"expected {describe_shape(expected)}"
            )
        if self.check_finite and not np.isfinite(window).all():
            frame_ok = np.isfinite(window.reshape(-1, *window.shape[-2:])).all(axis=(0, 2))
            bad = [t_start + int(t) for t in np.flatnonzero(~frame_ok)]
            raise NonFiniteDataError(
                f"{self.path}: key '{self._key_of(sample)}': sample {sample} has NaN/Inf values in "
                f"frame(s) {bad} (window {t_start}:{t_stop}, shape {describe_shape(window.shape)}); "
                "pass nan_policy='skip' to the dataset to skip such windows"
            )
        return window

    def trajectory_hash(self, sample: int) -> str:
        """The content hash of trajectory ``sample``: every channel of the file in its own order, all frames, as the
        float32 ``[*S, T, C]`` values this reader gives (:func:`opzoo.data.fingerprint.values_hash`). The same values in
        another file, layout, compression or stored dtype (cast to float32) hash alike. Cached per opened file."""
        from opzoo.data.fingerprint import values_hash

        cache = self.__dict__.setdefault("_hashes", {})
        if sample not in cache:
            plan, check = self._plan, self.check_finite
            self._plan, self.check_finite = None, False
            try:
                cache[sample] = values_hash(self.read(sample))
            finally:
                self._plan, self.check_finite = plan, check
        return cache[sample]

    def finite_frames(self, sample: int) -> np.ndarray:
        """``[T]`` bool: which frames of trajectory ``sample`` are entirely finite."""
        check, self.check_finite = self.check_finite, False
        try:
            traj = self.read(sample)
        finally:
            self.check_finite = check
        return np.isfinite(traj.reshape(-1, *traj.shape[-2:])).all(axis=(0, 2))

    def close(self) -> None:
        if self._file is not None:
            try:
                if callable(getattr(self._file, "close", None)):  # an np.memmap has none: dropping it closes it
                    self._file.close()
            finally:
                self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_file"] = None
        state["_pid"] = None
        return state

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}('{self.path}', layout={self.layout}, "
            f"shape [N, *S, T, C] = {describe_shape(self.shape)}, fields={self.fields})"
        )

    @classmethod
    def claims_directory(cls, path: str | os.PathLike) -> bool:
        """Whether the directory ``path`` is a dataset of this layout: by default, for a reader that
        :attr:`reads_directories`, when its name ends in one of :attr:`suffixes` (``run7.frames/``). Override it to
        tell by the directory's content (a sidecar file in it)."""
        name = os.fspath(path).rstrip("/\\").lower()
        return cls.reads_directories and any(name.endswith(x.lower()) for x in cls.suffixes)

    def files(self) -> list[str]:
        """Every file that holds this dataset: the file named, or every file under a directory (sorted; names that
        start with ``.`` left out). A reader whose dataset spans several files (a sidecar and the frame files it
        names) returns them all, so that an edit of any of them is seen (:func:`opzoo.data.fingerprint.content_hash`)."""
        from opzoo.data.fingerprint import files_at

        return files_at(self.path)

    # -- helpers for subclasses -----------------------------------------------------------------
    def _h5(self) -> h5py.File:
        if self._file is None or self._pid != os.getpid():
            self._file = open_h5(self.path)
            self._pid = os.getpid()
        return self._file

    def _require(self, f: h5py.File | h5py.Group, key: str, rank: int | tuple[int, ...], layout_shape: str):
        """Return dataset ``key``; raise DataFormatError naming it if missing or of wrong rank."""
        ranks = (rank,) if isinstance(rank, int) else tuple(rank)
        if key not in f:
            keys = sorted(f.keys()) if isinstance(f, h5py.Group) else []
            found = keys[:20] + ([f"... {len(keys) - 20} more"] if len(keys) > 20 else [])
            raise DataFormatError(
                f"{self.path}: key '{_join(f.name, key)}' is missing; the {self.layout} layout expects "
                f"'{key}' shaped {layout_shape}. Found keys: {found}"
            )
        ds = f[key]
        name = _join(f.name, key)
        if not isinstance(ds, h5py.Dataset):
            raise DataFormatError(
                f"{self.path}: key '{name}' is a group; the {self.layout} layout expects a dataset "
                f"shaped {layout_shape}"
            )
        if ds.ndim not in ranks:
            raise DataFormatError(
                f"{self.path}: key '{name}' has shape {describe_shape(ds.shape)} (rank {ds.ndim}); "
                f"the {self.layout} layout expects {layout_shape} (rank {' or '.join(map(str, ranks))})"
            )
        from opzoo.data.readers.h5_audit import check_data_dataset

        check_data_dataset(ds, name, self.path)
        return ds

    def _fail(self, message: str) -> DataFormatError:
        return DataFormatError(f"{self.path}: {message}")


def _stat_stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _join(group_name: str, key: str) -> str:
    return key if group_name in ("/", "") else f"{group_name.lstrip('/')}/{key}"


def decode_str(value) -> str:
    """An HDF5 string attribute (bytes, numpy bytes or str) as str."""
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8")
    return str(value)


def decode_str_list(value) -> list[str]:
    """An HDF5 list-of-strings attribute as a list of str."""
    if isinstance(value, (str, bytes, np.bytes_)):
        return [decode_str(value)]
    return [decode_str(v) for v in np.asarray(value).ravel()]


def evaluate(expression, window: np.ndarray, names: list[str]) -> np.ndarray:
    """An :class:`opzoo.registry.contract.Expression` of the channels ``names`` of ``window [..., C]`` -> ``[...]``."""
    if expression.constant:
        return np.full(window.shape[:-1], expression.number, dtype=np.float32)
    a = window[..., names.index(expression.a)]
    if expression.func == "log10":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log10(a)  # a non-positive value gives -inf or NaN, which the read refuses, naming the channel
    if expression.negate:
        return -a
    if expression.op is None:
        return a
    b = window[..., names.index(expression.b)] if expression.b is not None else np.float32(expression.number)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[expression.op](a, b)


def dt_from_times(times: np.ndarray | None) -> float | None:
    """The constant step of a time array, or None if it has fewer than two entries."""
    if times is None or len(times) < 2:
        return None
    return float(np.median(np.diff(np.asarray(times, dtype=np.float64))))

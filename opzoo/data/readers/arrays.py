"""Reader for plain arrays: ``.npy``, ``.npz`` and tensor-only ``.pt``/``.pth`` files.

A plain array does not say which axis is which, and every order is plausible (``[N, X, Y, T, C]`` and
``[N, T, X, Y, C]`` have the same rank), so the order is never guessed: it is named by the layout
``array:<axes>``, e.g. ``array:NTXYC`` for ``[N, T, X, Y, C]`` (letters N, X, Y, Z, T, C, each once;
without C the array has one channel, added as a last axis), or carried by the file itself: an entry
``axes`` (a string such as ``"NTXYC"``) in a ``.npz`` or in a ``.pt`` dict beside ``data``. Without
either, the file is refused with its plausible readings and the exact layout for each.

A ``.npz`` holds one array (or one named ``data``); a ``.pt`` holds one tensor (or a dict with one, or
``data``) and is read with ``torch.load(weights_only=True)``, never unpickling code. ``.npy`` files are
memory-mapped, so reads are lazy; ``.npz`` and ``.pt`` are read whole on first use.
"""

from __future__ import annotations

import os
import pickle

import numpy as np

from opzoo.data.errors import DataFormatError, describe_shape
from opzoo.data.readers.base import SourceInfo, TrajectorySource

SUFFIXES = (".npy", ".npz", ".pt", ".pth")
SPATIAL = "XYZ"


def parse_order(layout: str, ndim: int | None = None) -> str:
    """The axes letters of layout ``array:<axes>`` (``""`` for a bare ``array``: the order is not stated).
    C may be left out (one channel); N, T and X[, Y[, Z]] may not."""
    _, _, axes = layout.partition(":")
    return check_axes(axes, f"layout {layout!r}")


def check_axes(axes: str, where: str) -> str:
    axes = axes.replace(",", "").replace(" ", "").upper()
    if not axes:
        return ""
    spatial = [a for a in axes if a in SPATIAL]
    if (len(axes) != len(set(axes)) or set(axes) - set("NTC" + SPATIAL) or not {"N", "T"} <= set(axes)
            or "".join(sorted(spatial)) != SPATIAL[: len(spatial)] or not spatial):
        raise DataFormatError(f"{where}: the axes must be N, T, X[, Y[, Z]] and C (C may be left out: one channel), "
                              f"each once, e.g. 'array:NTXYC' or 'array:NTXY'")
    return axes


def plausible_orders(shape: tuple[int, ...]) -> list[str]:
    """The axis orders a user's array of ``shape`` plausibly has: N first; time before or after the spatial
    axes; channels last, first after N, or absent; 1-3 spatial axes."""
    rank, out = len(shape), []
    for channels in ("last", "none", "first"):
        n_spatial = rank - 2 - (channels != "none")
        if not 1 <= n_spatial <= 3:
            continue
        s = SPATIAL[:n_spatial]
        for body in (s + "T", "T" + s):
            order = {"last": "N" + body + "C", "none": "N" + body, "first": "NC" + body}[channels]
            if order not in out:
                out.append(order)
    return out


def describe_readings(path: str, shape: tuple[int, ...]) -> str:
    """The refusal of an array whose order is not stated: each plausible reading, its sizes and layout."""
    readings = []
    for order in plausible_orders(shape):
        sizes = ", ".join(f"{a}={n}" for a, n in zip(order, shape))
        readings.append(f"--layout array:{order} ({sizes}{'; one channel, added' if 'C' not in order else ''})")
    found = "; ".join(readings) if readings else f"none (rank {len(shape)} is not N, T, 1-3 spatial axes and maybe C)"
    return (f"{path}: a plain array {describe_shape(shape)} does not say which axis is which, and opzoo does not "
            f"guess; name the order with --layout (or `layout:` in a run config, or an 'axes' entry in a .npz/.pt "
            f"file). Plausible readings: {found}")


class ArraySource(TrajectorySource):
    """A ``.npy``/``.npz``/tensor-only ``.pt`` array of trajectories (see the module doc)."""

    layout = "array"
    suffixes = SUFFIXES
    expects = ("a .npy, .npz or tensor-only .pt file holding one array [N, *S, T, C]; another axis order with "
               "layout 'array:<axes>', e.g. 'array:NTXYC'")

    def __init__(self, path, check_finite: bool = True, order: str = "array", fields: list[str] | None = None):
        self.order_spec = order
        self.named_fields = list(fields) if fields else None  # --fields: the channels' names, in order
        self._array = None
        super().__init__(path, check_finite=check_finite)

    @classmethod
    def detect(cls, f) -> bool:  # detected by suffix in open_source, never from an HDF5 handle
        return False

    def _h5(self):
        if self._array is None:
            self._array, self.file_axes, self.file_fields, self.file_coords = load_fields(self.path)
        return self._array

    def close(self) -> None:
        self._array = None

    def __getstate__(self):  # workers re-open the file; a memory map must not be pickled as data
        state = super().__getstate__()
        state["_array"] = None
        return state

    def _validate(self, a) -> SourceInfo:
        stated = parse_order(self.order_spec, a.ndim)
        in_file = check_axes(self.file_axes, f"{self.path}: its 'axes' entry {self.file_axes!r}") if self.file_axes else ""
        self.file_params = self.file_coords.pop("params", {}) if isinstance(self.file_coords, dict) else {}
        if self.file_fields is not None:  # one array per field, stacked last: the entries name the other axes
            stated = stated and (stated if "C" in stated else stated + "C")
            in_file = in_file and (in_file if "C" in in_file else in_file + "C")
        if stated and in_file and stated != in_file:
            raise self._fail(f"layout {self.order_spec!r} contradicts the file's own 'axes' entry {in_file!r}")
        self.axes = stated or in_file
        self.axis_note = ("as named (--layout " + self.order_spec + ")" if stated else
                          "as its own 'axes' entry says" if in_file else "")
        if not self.axes and self.file_fields is not None and self.file_coords:
            from opzoo.data.readers.axes import candidate_orders, verify_order

            order = verify_order(self.path, "fields", tuple(a.shape[:-1]), "", candidate_orders(a.ndim - 1, "N", False),
                                 {k: v for k, v in self.file_coords.items() if k != "T"},
                                 self.file_coords.get("T"), "array")
            self.axes = order.axes + "C"
            self.axis_note = (f"as its coordinate arrays ({', '.join(k.lower() for k in self.file_coords)}) say, "
                              f"one array per field ({', '.join(self.file_fields)})")
        if not self.axes:
            raise DataFormatError(describe_readings(self.path, tuple(a.shape)))
        if len(self.axes) != a.ndim:
            raise self._fail(f"array {describe_shape(a.shape)} has rank {a.ndim}; layout "
                             f"{('array:' + self.axes)!r} names {len(self.axes)} axes ({self.axes})")
        size = dict(zip(self.axes, a.shape))
        size.setdefault("C", 1)
        spatial = tuple(size[s] for s in SPATIAL if s in size)
        if not np.issubdtype(a.dtype, np.floating) and not np.issubdtype(a.dtype, np.integer):
            raise self._fail(f"array dtype {a.dtype} is not numeric")
        names = self.named_fields or self.file_fields or [f"c{i}" for i in range(size["C"])]
        if len(names) != size["C"]:
            raise self._fail(f"--fields names {len(names)} field(s) ({', '.join(names)}), but the array has "
                             f"C = {size['C']} channel(s)")
        if self.named_fields and self.file_fields and self.named_fields != self.file_fields:
            raise self._fail(f"--fields {','.join(self.named_fields)} contradicts the file's own arrays "
                             f"({', '.join(self.file_fields)})")
        return SourceInfo(layout=self.layout, n_samples=size["N"], spatial_shape=spatial, n_steps=size["T"],
                          fields=list(names), axis_note=self.axis_note, params=dict(self.file_params))

    def _read(self, a, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        one = np.take(a, sample, axis=self.axes.index("N"))
        rest = self.axes.replace("N", "")
        if "C" not in rest:
            one, rest = one[..., None], rest + "C"
        target = [s for s in SPATIAL if s in rest] + ["T", "C"]
        one = np.transpose(one, [rest.index(x) for x in target])
        return np.asarray(one[..., t_start:t_stop, :])


def load_array(path: str, with_axes: bool = False):
    """The one array in ``path`` (``.npy`` memory-mapped); DataFormatError naming the file otherwise. With
    ``with_axes``, ``(array, axes)``: the file's own ``axes`` entry (``""`` when it has none)."""
    array, axes, _, _ = _load_array(path)
    return (array, axes) if with_axes else array


def load_fields(path: str) -> tuple[np.ndarray, str, list[str] | None, dict[str, int]]:
    """``(array, axes entry, field names, coordinate lengths)`` of ``path``: names and coordinates where the file
    holds one array per field (a ``.npz`` or a ``.pt`` dict), else None and ``{}``."""
    return _load_array(path)


def _load_array(path: str) -> tuple[np.ndarray, str, list[str] | None, dict[str, int]]:
    suffix = os.path.splitext(path)[1].lower()
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise DataFormatError(f"{path}: an empty file (0 bytes), not an array; write it again (numpy.save, torch.save)")
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="r", allow_pickle=False), "", None, {}
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            axes = arrays.pop("axes", None)
            # 0-d entries are the file's parameters (a reaction's F, k), not fields: read apart, said by inspect
            scalars = {k: arrays.pop(k) for k in [k for k, v in arrays.items() if np.ndim(v) == 0]}
            array, names, coords = _one(path, arrays, scalars)
            if scalars:
                coords = {**coords, "params": {k: _scalar(v) for k, v in scalars.items()}}
            return array, _axes_entry(path, axes), names, coords
        _refuse_hdf5(path)
        if suffix not in (".pt", ".pth"):
            raise DataFormatError(f"{path}: not a .npy, .npz or .pt array file (layout 'array' reads those)")
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
    except (ValueError, OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:  # objects, bad zips, truncated
        reason = next((line.strip() for line in str(e).splitlines() if "Unsupported global" in line),
                      str(e).splitlines()[0] if str(e) else type(e).__name__).split(" was not")[0]
        reason = reason or type(e).__name__
        if "allow_pickle" in reason or "pickle" in reason.lower():  # never relay advice to turn the protection off
            reason = "it holds pickled objects, or is not a numpy file at all; opzoo never unpickles a data file"
        raise DataFormatError(f"{path}: cannot be read as a plain {suffix} array ({reason}); save one array with "
                              f"numpy.save, or a tensor (or a dict of tensors) with torch.save") from None
    if isinstance(obj, dict):
        axes = obj.get("axes")
        array, names, coords = _one(path, {k: v.numpy() for k, v in obj.items() if hasattr(v, "numpy")})
        return array, _axes_entry(path, axes), names, coords
    if not hasattr(obj, "numpy"):
        raise DataFormatError(f"{path}: holds a {type(obj).__name__}, not a tensor")
    return obj.numpy(), "", None, {}


def _axes_entry(path: str, axes) -> str:
    """A file's ``axes`` entry as a string (``""`` when absent)."""
    if axes is None:
        return ""
    if isinstance(axes, np.ndarray) and axes.ndim == 0:
        axes = axes.item()
    if isinstance(axes, bytes):
        axes = axes.decode()
    if not isinstance(axes, str):
        raise DataFormatError(f"{path}: its 'axes' entry must be a string such as 'NTXYC', got {axes!r}")
    return axes


def _refuse_hdf5(path: str) -> None:
    """An HDF5 file given to the array reader is named as such (not a pickle error)."""
    with open(path, "rb") as f:
        if f.read(8) == b"\x89HDF\r\n\x1a\n":
            raise DataFormatError(f"{path}: an HDF5 file, not a plain array; leave --layout out (it is detected) or "
                                  f"name an HDF5 layout (opzoo data inspect {path})")


COORDINATE_NAMES = ("x", "y", "z", "t")


def _scalar(value) -> float | int | str:
    value = np.asarray(value)
    item = value.item()
    if value.dtype in (np.float32, np.float16):  # as written, not its float64 widening (0.04, not 0.03999999910...)
        item = float(f"{item:.{7 if value.dtype == np.float32 else 4}g}")
    return item if isinstance(item, (int, float, str)) else str(item)


def _one(path: str, arrays: dict[str, np.ndarray],
         scalars: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, list[str] | None, dict[str, int]]:
    """``(array, field names, coordinate lengths)`` of a file's arrays: ``data`` (or the only array) as it is, or one
    array per field (every array of rank 2 or more, all of one shape) stacked as the last axis, with 1-D arrays named
    x, y, z or t taken as coordinates (their lengths). ``scalars``: 0-d entries already set apart as parameters."""
    if not arrays:
        raise DataFormatError(f"{path}: holds only 0-d values ({', '.join(scalars or {})}): parameters, no "
                              f"trajectories; save the trajectories beside them (e.g. numpy.savez(file, data=u, "
                              f"F=F, k=k))")
    if "data" in arrays:
        return arrays["data"], None, {}
    if len(arrays) == 1:
        return next(iter(arrays.values())), None, {}
    coords = {k.upper(): int(v.size) for k, v in arrays.items() if k.lower() in COORDINATE_NAMES and v.ndim == 1}
    fields = {k: v for k, v in arrays.items() if not (k.lower() in COORDINATE_NAMES and v.ndim == 1)}
    shapes = {tuple(v.shape) for v in fields.values()}
    if len(shapes) != 1 or not fields or min(v.ndim for v in fields.values()) < 2:
        described = ", ".join(f"{k} {describe_shape(v.shape)}" for k, v in sorted(arrays.items()))
        raise DataFormatError(f"{path}: holds {len(arrays)} arrays ({described}); one per field must share one shape "
                              f"(1-D x, y, z, t are read as coordinates), or name the trajectories 'data'")
    names = list(fields)
    return np.stack([fields[n] for n in names], axis=-1), names, coords


__all__ = ["ArraySource", "SUFFIXES", "parse_order", "load_array"]

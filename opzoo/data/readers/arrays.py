"""Reader for plain arrays: ``.npy``, ``.npz`` and tensor-only ``.pt``/``.pth`` files.

The array holds the trajectories in the canonical order ``[N, *S, T, C]`` (1-3 spatial dims), or in
another order named by the layout ``array:<axes>``, e.g. ``array:NTXYC`` for ``[N, T, X, Y, C]``
(letters N, X, Y, Z, T, C, each once). A ``.npz`` holds one array (or one named ``data``); a ``.pt``
holds one tensor (or a dict with one, or ``data``) and is read with ``torch.load(weights_only=True)``,
never unpickling code. ``.npy`` files are memory-mapped, so reads are lazy; ``.npz`` and ``.pt`` are
read whole on first use.
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
    """The axes letters of layout ``array`` / ``array:<axes>`` (``None`` order: canonical for ``ndim``)."""
    _, _, axes = layout.partition(":")
    axes = axes.replace(",", "").replace(" ", "").upper()
    if not axes:
        if ndim is None:
            return ""
        if not 4 <= ndim <= 6:
            raise DataFormatError(f"an array of rank {ndim} is not [N, *S, T, C] with 1-3 spatial dims")
        return "N" + SPATIAL[: ndim - 3] + "TC"
    spatial = [a for a in axes if a in SPATIAL]
    if (len(axes) != len(set(axes)) or set(axes) - set("NTC" + SPATIAL) or not {"N", "T", "C"} <= set(axes)
            or "".join(sorted(spatial)) != SPATIAL[: len(spatial)] or not spatial):
        raise DataFormatError(f"layout {layout!r}: the axes must be N, T, C and X[, Y[, Z]], each once, "
                              f"e.g. 'array:NTXYC'")
    return axes


class ArraySource(TrajectorySource):
    """A ``.npy``/``.npz``/tensor-only ``.pt`` array of trajectories (see the module doc)."""

    layout = "array"
    expects = ("a .npy, .npz or tensor-only .pt file holding one array [N, *S, T, C]; another axis order with "
               "layout 'array:<axes>', e.g. 'array:NTXYC'")

    def __init__(self, path, check_finite: bool = True, order: str = "array"):
        self.order_spec = order
        self._array = None
        super().__init__(path, check_finite=check_finite)

    @classmethod
    def detect(cls, f) -> bool:  # detected by suffix in open_source, never from an HDF5 handle
        return False

    def _h5(self):
        if self._array is None:
            self._array = load_array(self.path)
        return self._array

    def close(self) -> None:
        self._array = None

    def __getstate__(self):  # workers re-open the file; a memory map must not be pickled as data
        state = super().__getstate__()
        state["_array"] = None
        return state

    def _validate(self, a) -> SourceInfo:
        try:
            self.axes = parse_order(self.order_spec, a.ndim)
        except DataFormatError as e:
            raise self._fail(f"array {describe_shape(a.shape)}: {e}") from None
        if len(self.axes) != a.ndim:
            raise self._fail(f"array {describe_shape(a.shape)} has rank {a.ndim}; layout {self.order_spec!r} "
                             f"names {len(self.axes)} axes ({self.axes})")
        size = dict(zip(self.axes, a.shape))
        spatial = tuple(size[s] for s in SPATIAL if s in size)
        if not np.issubdtype(a.dtype, np.floating) and not np.issubdtype(a.dtype, np.integer):
            raise self._fail(f"array dtype {a.dtype} is not numeric")
        return SourceInfo(layout=self.layout, n_samples=size["N"], spatial_shape=spatial, n_steps=size["T"],
                          fields=[f"c{i}" for i in range(size["C"])])

    def _read(self, a, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        one = np.take(a, sample, axis=self.axes.index("N"))
        rest = self.axes.replace("N", "")
        target = [s for s in SPATIAL if s in rest] + ["T", "C"]
        one = np.transpose(one, [rest.index(x) for x in target])
        return np.asarray(one[..., t_start:t_stop, :])


def load_array(path: str) -> np.ndarray:
    """The one array in ``path`` (``.npy`` memory-mapped); DataFormatError naming the file otherwise."""
    suffix = os.path.splitext(path)[1].lower()
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        if suffix == ".npy":
            return np.load(path, mmap_mode="r", allow_pickle=False)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return _one(path, {k: z[k] for k in z.files})
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
    except (ValueError, OSError, RuntimeError, pickle.UnpicklingError) as e:  # objects, bad zips, truncated files
        reason = next((line.strip() for line in str(e).splitlines() if "Unsupported global" in line),
                      str(e).splitlines()[0] if str(e) else type(e).__name__).split(" was not")[0]
        raise DataFormatError(f"{path}: cannot be read as a plain {suffix} array ({reason}); save one array with "
                              f"numpy.save, or a tensor (or a dict of tensors) with torch.save") from None
    if isinstance(obj, dict):
        return _one(path, {k: v.numpy() for k, v in obj.items() if hasattr(v, "numpy")})
    if not hasattr(obj, "numpy"):
        raise DataFormatError(f"{path}: holds a {type(obj).__name__}, not a tensor")
    return obj.numpy()


def _one(path: str, arrays: dict[str, np.ndarray]) -> np.ndarray:
    if "data" in arrays:
        return arrays["data"]
    if len(arrays) != 1:
        raise DataFormatError(f"{path}: holds {len(arrays)} arrays ({', '.join(sorted(arrays))}); keep one, or name "
                              f"the trajectories 'data'")
    return next(iter(arrays.values()))


__all__ = ["ArraySource", "SUFFIXES", "parse_order", "load_array"]

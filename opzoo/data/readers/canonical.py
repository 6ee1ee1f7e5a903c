"""Reader for the canonical layout (and DPOT's processed files): ``data`` ``[N, *S, T, C]``.

A ``data`` dataset stored in another order says so in its attribute ``axes`` (e.g. ``"NTXYC"``; without
C: one channel), and is read in that order."""

from __future__ import annotations

import json

import h5py
import numpy as np

from opzoo.data.canonical import DATA_KEY
from opzoo.data.readers.arrays import check_axes
from opzoo.data.readers.axes import candidate_orders, verify_order
from opzoo.data.readers.base import SourceInfo, TrajectorySource, decode_str, decode_str_list, dt_from_times

LAYOUT_SHAPE = "[N, *S, T, C] with 1-3 spatial dims"


class CanonicalSource(TrajectorySource):
    """Canonical opzoo file or DPOT processed file. Attributes are optional (DPOT's files have none):
    missing ``fields`` become ``c0, c1, ...``."""

    layout = "canonical"
    expects = (f"dataset 'data' {LAYOUT_SHAPE} (float), attrs 'fields', 'dt', 'pde', 'params' optional; another axis "
               f"order: its attribute 'axes', or 'canonical:NTCXY'")
    takes_order = True

    def __init__(self, path, check_finite: bool = True, order: str = "", fields=None):
        self.order_spec = order
        self.given_fields = None if fields is None else [str(f) for f in fields]  # --fields, where the file names none
        super().__init__(path, check_finite=check_finite)

    @classmethod
    def detect(cls, f: h5py.File) -> bool:
        return DATA_KEY in f and isinstance(f[DATA_KEY], h5py.Dataset)

    def _validate(self, f: h5py.File) -> SourceInfo:
        ds = self._require(f, DATA_KEY, (3, 4, 5, 6), LAYOUT_SHAPE)
        note = ""
        named = check_axes(self.order_spec, f"layout 'canonical:{self.order_spec}'") if self.order_spec else ""
        if named:
            said = decode_str(ds.attrs["axes"]) if "axes" in ds.attrs else None
            if said is not None and check_axes(said, "") != named:
                raise self._fail(f"layout 'canonical:{named}' contradicts key '{DATA_KEY}''s attribute 'axes' {said!r}")
            self.axes, note = named, f"as named (--layout canonical:{named})"
        elif "axes" in ds.attrs:
            self.axes = check_axes(decode_str(ds.attrs["axes"]), f"{self.path}: key '{DATA_KEY}' attribute 'axes'")
            note = "as its attribute 'axes' says"
        else:  # the layout's order, checked against the file's time and coordinate attributes
            self.axes = "N" + "XYZ"[: max(ds.ndim - 3, 0)] + "TC"
            if ds.ndim >= 4:
                attrs = f.attrs
                coords = {d.upper(): int(np.size(attrs[f"coord_{d}"])) for d in "xyz" if f"coord_{d}" in attrs}
                order = verify_order(self.path, DATA_KEY, tuple(ds.shape), self.axes,
                                     candidate_orders(ds.ndim, "N", channels=True), coords,
                                     int(np.size(attrs["time"])) if "time" in attrs else None, self.layout)
                self.axes, note = order.axes, order.note + " (another order: the dataset's attribute 'axes')"
        if len(self.axes) != ds.ndim or ds.ndim < 4 and "C" in self.axes:
            raise self._fail(f"key '{DATA_KEY}' has shape {list(ds.shape)}, which is not {self.axes} "
                             f"({'its attribute axes' if 'axes' in ds.attrs else LAYOUT_SHAPE})")
        size = {a: n for a, n in zip(self.axes, ds.shape)}
        n, steps, channels = size["N"], size["T"], size.get("C", 1)
        spatial = [size[a] for a in "XYZ" if a in size]
        attrs = dict(f.attrs)
        on_data = {k: ds.attrs[k] for k in ("fields", "boundary") if k in ds.attrs}  # said on the dataset itself
        for key, value in on_data.items():
            if key in attrs and decode_str_list(attrs[key]) != decode_str_list(value):
                raise self._fail(f"the root attribute {key!r} ({decode_str_list(attrs[key])}) and key '{DATA_KEY}''s "
                                 f"attribute {key!r} ({decode_str_list(value)}) disagree; keep one")
            attrs.setdefault(key, value)
        fields = decode_str_list(attrs["fields"]) if "fields" in attrs else [f"c{i}" for i in range(channels)]
        if len(fields) == 1 and channels > 1 and len(fields[0].split(",")) == channels:
            fields = [f.strip() for f in fields[0].split(",")]  # "u,v": one string, as --fields takes them
        if self.given_fields is not None:
            if "fields" in attrs:
                raise self._fail(f"--fields {','.join(self.given_fields)}: the file names its channels itself "
                                 f"({', '.join(fields)}); read them under other names with --field-map FILE=MODEL")
            fields = list(self.given_fields)
        if len(fields) != channels:
            raise self._fail(
                f"key '{DATA_KEY}' has C = {channels} channels (shape {list(ds.shape)}) but attribute "
                f"'fields' names {len(fields)}: {fields}"
            )
        times = np.asarray(attrs["time"], dtype=np.float64) if "time" in attrs else None
        if times is not None and len(times) != steps:
            raise self._fail(f"attribute 'time' has {len(times)} entries, key '{DATA_KEY}' has T = {steps}")
        params = attrs.get("params", "{}")
        try:
            params = json.loads(decode_str(params))
        except json.JSONDecodeError as exc:
            raise self._fail(f"attribute 'params' is not valid JSON ({exc})") from exc
        dims = decode_str_list(attrs["spatial_dims"]) if "spatial_dims" in attrs else ["x", "y", "z"][: len(spatial)]
        coords = {d: np.asarray(attrs[f"coord_{d}"]) for d in dims if f"coord_{d}" in attrs}
        dt = float(attrs["dt"]) if "dt" in attrs else dt_from_times(times)
        return SourceInfo(
            layout=self.layout,
            n_samples=n,
            spatial_shape=tuple(spatial),
            n_steps=steps,
            fields=fields,
            dt=dt,
            times=times,
            pde=decode_str(attrs.get("pde", "")),
            params=params,
            coords=coords,
            attrs={k: v for k, v in attrs.items() if not k.startswith("coord_")},
            axis_note=note,
            boundary=(str(params["boundary"]) if isinstance(params, dict) and params.get("boundary") else
                      decode_str(attrs["boundary"]) if "boundary" in attrs else None),
        )

    def _read(self, f: h5py.File, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        index = tuple(sample if a == "N" else slice(t_start, t_stop) if a == "T" else slice(None) for a in self.axes)
        one, rest = f[DATA_KEY][index], self.axes.replace("N", "")
        if "C" not in rest:
            one, rest = one[..., None], rest + "C"
        return np.transpose(one, [rest.index(a) for a in [*(s for s in "XYZ" if s in rest), "T", "C"]])

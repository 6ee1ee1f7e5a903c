"""Reader for The Well's HDF5 files (PolymathicAI/the_well, docs/data_format.md).

Root attributes ``dataset_name``, ``n_spatial_dims``, ``n_trajectories``, ``grid_type``,
``simulation_parameters``; group ``dimensions`` (attr ``spatial_dims``, datasets ``time`` and one
per spatial axis); ``boundary_conditions``; ``scalars``; and the fields:

* ``t0_fields/<name>``: scalar fields ``[N, T, *S]``
* ``t1_fields/<name>``: vector fields ``[N, T, *S, D]``
* ``t2_fields/<name>``: tensor fields ``[N, T, *S, D, D]``

Each field has attributes ``sample_varying`` and ``time_varying``; a field that does not vary
drops that axis and is broadcast here. Channels are ordered t0, t1, t2 and, inside each group, as
its ``field_names`` attribute lists them; vector components are named ``<field>_<axis>`` and tensor
components ``<field>_<axis><axis>``.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import h5py
import numpy as np

from opzoo.data.readers.base import SourceInfo, TrajectorySource, decode_str, decode_str_list, dt_from_times

FIELD_GROUPS = ("t0_fields", "t1_fields", "t2_fields")


class _Component(NamedTuple):
    """One channel: component ``index`` of the field at ``key``."""

    key: str
    channel: str
    index: tuple[int, ...]
    sample_varying: bool
    time_varying: bool


class TheWellSource(TrajectorySource):
    """A file of The Well, read as ``[*S, T, C]`` trajectories with every tensor component a channel."""

    layout = "the-well"
    expects = (
        "root attrs 'n_spatial_dims', 'dataset_name'; group 'dimensions' (attr 'spatial_dims', dataset 'time' [T]); "
        "groups 't0_fields/<name>' [N, T, *S], 't1_fields/<name>' [N, T, *S, D], 't2_fields/<name>' [N, T, *S, D, D]"
    )

    @classmethod
    def detect(cls, f: h5py.File) -> bool:
        return any(g in f for g in FIELD_GROUPS) or "n_spatial_dims" in f.attrs

    def _validate(self, f: h5py.File) -> SourceInfo:
        if "n_spatial_dims" not in f.attrs:
            raise self._fail(f"root attribute 'n_spatial_dims' is missing; the {self.layout} layout expects it")
        d = int(f.attrs["n_spatial_dims"])
        if "dimensions" not in f:
            raise self._fail(f"group 'dimensions' is missing; the {self.layout} layout expects {self.expects}")
        dims_group = f["dimensions"]
        axes = decode_str_list(dims_group.attrs.get("spatial_dims", ["x", "y", "z"][:d]))
        if len(axes) != d:
            raise self._fail(f"'dimensions' attribute 'spatial_dims' = {axes} but n_spatial_dims = {d}")
        times = np.asarray(self._require(dims_group, "time", 1, "[T]")[()], dtype=np.float64)
        spatial = [self._require(dims_group, a, 1, f"[{a.upper()}]").shape[0] for a in axes]
        n = int(f.attrs["n_trajectories"]) if "n_trajectories" in f.attrs else None

        self.components: list[_Component] = []
        for order, group_name in enumerate(FIELD_GROUPS):
            if group_name in f:
                n = self._add_components(f[group_name], order, axes, n, len(times), spatial)
        if not self.components:
            raise self._fail(f"no fields found in {list(FIELD_GROUPS)}; the {self.layout} layout expects {self.expects}")
        if n is None:
            raise self._fail("cannot tell N: no sample-varying field and no root attribute 'n_trajectories'")
        param_names = [decode_str(p) for p in decode_str_list(f.attrs.get("simulation_parameters", []))]
        return SourceInfo(
            layout=self.layout,
            n_samples=n,
            spatial_shape=tuple(spatial),
            n_steps=len(times),
            fields=[c.channel for c in self.components],
            dt=dt_from_times(times),
            times=times,
            pde=decode_str(f.attrs.get("dataset_name", "")),
            params={p: _plain(f.attrs[p]) for p in param_names if p in f.attrs},
            coords={a: dims_group[a][()] for a in axes},
            attrs=dict(f.attrs),
            boundary=_boundary(f),
            axis_boundaries=axis_boundaries(f, axes),
        )

    def _add_components(
        self, group: h5py.Group, order: int, axes: list[str], n: int | None, steps: int, spatial: list[int]
    ) -> int | None:
        """Validate the fields of one ``t<order>_fields`` group and add their channels; returns N."""
        d = len(axes)
        names = decode_str_list(group.attrs["field_names"]) if "field_names" in group.attrs else sorted(group.keys())
        for name in names:
            key = f"{group.name.lstrip('/')}/{name}"
            if name not in group:
                raise self._fail(f"key '{key}' is missing but listed in the attribute 'field_names' {names}")
            sample_varying = bool(group[name].attrs.get("sample_varying", True))
            time_varying = bool(group[name].attrs.get("time_varying", True))
            lead = (["N"] if sample_varying else []) + (["T"] if time_varying else [])
            spec = f"[{', '.join(lead + [a.upper() for a in axes] + ['D'] * order)}]"
            found = list(self._require(group, name, len(lead) + d + order, spec).shape)
            if sample_varying and n is None:
                n = found[0]
            expected = ([n] if sample_varying else []) + ([steps] if time_varying else []) + spatial + [d] * order
            if found != expected:
                raise self._fail(
                    f"key '{key}' has shape {found}; expected {spec} = {expected} "
                    f"(N = {n}, T = {steps} from 'dimensions/time', S = {spatial} from 'dimensions')"
                )
            for index in itertools.product(range(d), repeat=order):
                suffix = "".join(axes[i] for i in index)
                channel = f"{name}_{suffix}" if suffix else name
                self.components.append(_Component(key, channel, index, sample_varying, time_varying))
        return n

    def _key_of(self, sample: int) -> str:
        return ", ".join(dict.fromkeys(c.key for c in self.components))

    def _read(self, f: h5py.File, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        cache: dict[str, np.ndarray] = {}
        channels = []
        steps = t_stop - t_start
        for key, _, index, sample_varying, time_varying in self.components:
            if key not in cache:
                selection = ((sample,) if sample_varying else ()) + ((slice(t_start, t_stop),) if time_varying else ())
                values = f[key][selection] if selection else f[key][()]
                if not time_varying:
                    values = np.broadcast_to(values[None], (steps, *values.shape))
                cache[key] = values  # [t, *S, (D, D)]
            channels.append(cache[key][(Ellipsis, *index)] if index else cache[key])
        return np.moveaxis(np.stack(channels, axis=-1), 0, -2)  # [*S, t, C]


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


BOUNDARY_KINDS = ("wall", "open", "periodic")  # The Well's codes 0, 1, 2 (the_well.data.datasets.BoundaryCondition)


def axis_boundaries(f: h5py.File, axes: list[str]) -> tuple[str, ...] | None:
    """Each axis's boundary, before and after, as The Well's own loader reads it (the_well 1.2.0
    ``WellDataset._padding_bcs``): open unless a ``boundary_conditions`` group says otherwise on that side; a group's
    type holds on a side where its ``mask`` marks any point of it, a wall only where it marks every point. As
    ``"periodic"``, ``"wall"``, ``"open"``, or ``"wall/open"`` where the sides differ; None when the file has no
    boundary groups or a group names an axis the file does not have."""
    if "boundary_conditions" not in f or not len(f["boundary_conditions"]):
        return None
    sides = {a: ["open", "open"] for a in axes}
    for bc in f["boundary_conditions"].values():
        kind = decode_str(bc.attrs.get("bc_type", "")).lower()
        dims = decode_str_list(bc.attrs.get("associated_dims", []))
        if kind not in BOUNDARY_KINDS or not dims or any(d not in sides for d in dims) or "mask" not in bc:
            return None
        mask = np.asarray(bc["mask"][()], dtype=bool)
        if mask.ndim < len(dims):
            return None
        mask = mask[(0,) * (mask.ndim - len(dims))]  # a sample- or time-varying mask: its first
        agg = np.all if kind == "wall" else np.any
        for i, d in enumerate(dims):
            first = tuple(0 if j == i else slice(None) for j in range(len(dims)))
            last = tuple(-1 if j == i else slice(None) for j in range(len(dims)))
            if agg(mask[first]):
                sides[d][0] = kind
            if agg(mask[last]):
                sides[d][1] = kind
    return tuple(a if a == b else f"{a}/{b}" for a, b in (sides[d] for d in axes))


def _boundary(f: h5py.File) -> str | None:
    """The ``bc_type`` of each group in ``boundary_conditions`` (PERIODIC, WALL, OPEN), as ``"periodic"`` when every
    one is periodic, else ``"<name>: <type>; ..."``; None when the file has none."""
    if "boundary_conditions" not in f:
        return None
    kinds = {name: decode_str(bc.attrs.get("bc_type", "")).lower() for name, bc in f["boundary_conditions"].items()}
    if not kinds:
        return None
    if all(k == "periodic" for k in kinds.values()):
        return "periodic"
    return "; ".join(f"{name}: {k or 'unknown'}" for name, k in sorted(kinds.items()))

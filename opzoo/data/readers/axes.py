"""Which axis of a stored array is which, checked against what the file itself says.

A layout that assumes an order (PDEBench's ``tensor`` ``[N, T, *S]``, the canonical ``data`` ``[N, *S, T, C]``) is
checked against the file's coordinates: a time coordinate of ``T`` entries (or ``T + 1`` edges, as PDEBench's CFD
files store), and one coordinate per spatial axis of its size. The file is read as its coordinates say:

- the assumed order when they agree with it and with no other order;
- the one other order they agree with (said in :attr:`AxisOrder.note`);
- refused, listing each reading and the layout that names it, when they agree with none or with several, and, for a
  layout whose generic key says nothing (``tensor``), when the file has no coordinates at all: opzoo does not guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from opzoo.data.errors import DataFormatError, describe_shape

SPATIAL = "XYZ"


@dataclass(frozen=True)
class AxisOrder:
    """``axes``: one letter per stored axis (N, T, X, Y, Z, C); ``note``: how it was decided, for ``data inspect``."""

    axes: str
    note: str


def candidate_orders(rank: int, fixed: str, channels: bool) -> list[str]:
    """Orders of ``rank`` axes that begin with ``fixed`` (e.g. ``"N"``), put ``T`` anywhere after it and the spatial
    axes in X, Y, Z order, with ``C`` last when ``channels``."""
    free = rank - len(fixed) - (1 if channels else 0)
    n_spatial = free - 1
    if not 1 <= n_spatial <= 3:
        return []
    out = []
    for t in range(free):
        body = list(SPATIAL[:n_spatial])
        body.insert(t, "T")
        out.append(fixed + "".join(body) + ("C" if channels else ""))
    return out


def agrees(axes: str, shape: tuple[int, ...], coords: Mapping[str, int], time_length: int | None) -> bool:
    """Whether reading ``shape`` as ``axes`` fits the coordinate lengths (``coords``: axis letter -> points)."""
    size = dict(zip(axes, shape))
    if time_length is not None and time_length not in (size.get("T"), size.get("T", -2) + 1):
        return False
    return all(size.get(axis) == n for axis, n in coords.items())


def verify_order(path: str, key: str, shape: tuple[int, ...], assumed: str, candidates: list[str],
                 coords: Mapping[str, int], time_length: int | None, layout: str,
                 stated: str = "", refuse_unchecked: bool = False) -> AxisOrder:
    """The axis order of dataset ``key`` (``shape``) of ``path`` (see the module doc). ``stated``: an order the user
    named (``--layout LAYOUT:<axes>``), checked against the coordinates too; ``refuse_unchecked``: a file without
    coordinates is refused (the layout's key does not decide the order)."""
    where = f"{path}: '{key}' {describe_shape(shape)}"
    what = _described(coords, time_length)
    if stated:
        if len(stated) != len(shape):
            raise DataFormatError(f"{where} has rank {len(shape)}; layout '{layout}:{stated}' names {len(stated)} axes")
        if (coords or time_length is not None) and not agrees(stated, shape, coords, time_length):
            raise DataFormatError(f"{where} read as [{', '.join(stated)}] contradicts its {what}; "
                                  + _readings(shape, candidates, coords, time_length, layout))
        return AxisOrder(stated, f"as named (--layout {layout}:{stated})")
    if not coords and time_length is None:
        if refuse_unchecked:
            raise DataFormatError(f"{where} does not say which axis is which (no time or space coordinates), and "
                                  f"opzoo does not guess; " + _readings(shape, candidates, {}, None, layout))
        return AxisOrder(assumed, f"the {layout} layout's order, assumed: the file has no coordinates to check it")
    fitting = [c for c in candidates if agrees(c, shape, coords, time_length)]
    if fitting == [assumed]:
        return AxisOrder(assumed, f"the {layout} layout's order, which its {what} confirm")
    if len(fitting) == 1:
        return AxisOrder(fitting[0], f"as its {what} say (not the {layout} layout's usual "
                                     f"[{', '.join(assumed)}])")
    if not fitting:
        raise DataFormatError(f"{where}: its {what} fit no reading of the array; "
                              + _readings(shape, candidates, {}, None, layout))
    raise DataFormatError(f"{where}: its {what} fit more than one reading, and opzoo does not guess; "
                          + _readings(shape, fitting, {}, None, layout))


def _described(coords: Mapping[str, int], time_length: int | None) -> str:
    parts = ([f"t: {time_length} values"] if time_length is not None else []) + \
        [f"{a.lower()}: {n} points" for a, n in coords.items()]
    return f"coordinates ({', '.join(parts)})" if parts else "coordinates"


def _readings(shape: tuple[int, ...], candidates: list[str], coords, time_length, layout: str) -> str:
    rows = [f"--layout {layout}:{c} ({', '.join(f'{a}={n}' for a, n in zip(c, shape))})" for c in candidates]
    return "name the order: " + "; ".join(rows) if rows else "it has no reading as N, T and 1-3 spatial axes"


def check_stated_axes(axes: str, rank: int, where: str, channels: bool) -> str:
    """An order named by the user: N, T, X[, Y[, Z]] (and C where the layout has channels), each once."""
    axes = axes.replace(",", "").replace(" ", "").upper()
    allowed = {"N", "T", *SPATIAL[:3], *("C" if channels else "")}
    spatial = [a for a in axes if a in SPATIAL]
    if (len(axes) != rank or len(set(axes)) != len(axes) or set(axes) - allowed or not {"N", "T"} <= set(axes)
            or "".join(spatial) != SPATIAL[:len(spatial)] or not spatial):
        raise DataFormatError(f"{where}: the axes must be N, T and X[, Y[, Z]]{' and C' if channels else ''}, each "
                              f"once, one letter per axis of the array ({rank})")
    return axes


__all__ = ["AxisOrder", "candidate_orders", "agrees", "verify_order", "check_stated_axes"]

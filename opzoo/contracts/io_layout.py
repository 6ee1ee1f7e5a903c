"""How a backbone's data-shaped tensors map when the data changes shape (``Backbone.io_layout``).

:func:`opzoo.training.adapt_model` rebuilds a model for new ``in_channels``/``out_channels``,
``in_timesteps`` or ``img_size`` and copies the pretrained weights by the layout its backbone class
returns: ``{tensor name: [DimMap, ...] or "resize"}``. The index helpers below build the usual maps;
each returns, for every new index, the old index it keeps, or None for a new slice.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Iterator, Sequence


@dataclasses.dataclass(frozen=True)
class DimMap:
    """How dimension ``dim`` of a tensor maps: ``index[i]`` is the old index of new index ``i`` or None.

    ``fill`` says what an unmatched slice starts as: ``"zero"`` or ``"init"`` (the fresh initialization).
    """

    dim: int
    index: tuple[int | None, ...]
    fill: str = "init"


_CHANNELS: contextvars.ContextVar[tuple[int | None, ...] | None] = contextvars.ContextVar("opzoo_channel_map",
                                                                                         default=None)


@contextlib.contextmanager
def channel_correspondence(mapping: Sequence[int | None] | None) -> Iterator[None]:
    """While active, the data channels of :func:`time_channel_index` and :func:`fields_then_grid_index` map by
    ``mapping`` (new channel ``i`` keeps old channel ``mapping[i]``, None: a new one) instead of by position: a model
    that names its fields adapted to others keeps each field's weights under its name
    (:func:`opzoo.model_io.adapt.adapt_model` ``channel_map``)."""
    token = _CHANNELS.set(None if mapping is None else tuple(mapping))
    try:
        yield
    finally:
        _CHANNELS.reset(token)


def channel_index(c: int, c_new: int, c_old: int) -> int | None:
    """The old data channel new channel ``c`` keeps: by the active :func:`channel_correspondence` when it maps
    ``c_new`` channels, else by position."""
    mapping = _CHANNELS.get()
    if mapping is not None and len(mapping) == c_new:
        j = mapping[c]
        return j if j is not None and j < c_old else None
    return c if c < c_old else None


def prefix_index(n_new: int, n_old: int) -> tuple[int | None, ...]:
    """Index ``i`` keeps old index ``i`` where there is one: ``(0, 1, ..., None, ...)``."""
    return tuple(i if i < n_old else None for i in range(n_new))


def newest_aligned_index(t_new: int, t_old: int) -> tuple[int | None, ...]:
    """Time steps counted from the newest frame: new step ``t`` keeps old step ``t_old - t_new + t``."""
    return tuple(t_old - t_new + t if t_old - t_new + t >= 0 else None for t in range(t_new))


def time_channel_index(t_new: int, c_new: int, t_old: int, c_old: int) -> tuple[int | None, ...]:
    """A flattened time-major ``(t, c)`` axis, index ``t * C + c``: steps newest-aligned, channels by position (or by
    the active :func:`channel_correspondence`)."""
    times = newest_aligned_index(t_new, t_old)
    out = []
    for t in range(t_new):
        for c in range(c_new):
            old_t, old_c = times[t], channel_index(c, c_new, c_old)
            out.append(old_t * c_old + old_c if old_t is not None and old_c is not None else None)
    return tuple(out)


def fields_then_grid_index(c_new: int, c_old: int, grid: int) -> tuple[int | None, ...]:
    """``c_new`` data channels (by position, or by the active :func:`channel_correspondence`) followed by ``grid``
    coordinate channels, which keep theirs."""
    return tuple(channel_index(c, c_new, c_old) for c in range(c_new)) + tuple(c_old + j for j in range(grid))


__all__ = ["DimMap", "channel_correspondence", "channel_index", "fields_then_grid_index", "newest_aligned_index",
           "prefix_index", "time_channel_index"]

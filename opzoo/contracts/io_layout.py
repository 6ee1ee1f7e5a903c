"""How a backbone's data-shaped tensors map when the data changes shape (``Backbone.io_layout``).

:func:`opzoo.training.adapt_model` rebuilds a model for new ``in_channels``/``out_channels``,
``in_timesteps`` or ``img_size`` and copies the pretrained weights by the layout its backbone class
returns: ``{tensor name: [DimMap, ...] or "resize"}``. The index helpers below build the usual maps;
each returns, for every new index, the old index it keeps, or None for a new slice.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class DimMap:
    """How dimension ``dim`` of a tensor maps: ``index[i]`` is the old index of new index ``i`` or None.

    ``fill`` says what an unmatched slice starts as: ``"zero"`` or ``"init"`` (the fresh initialization).
    """

    dim: int
    index: tuple[int | None, ...]
    fill: str = "init"


def prefix_index(n_new: int, n_old: int) -> tuple[int | None, ...]:
    """Index ``i`` keeps old index ``i`` where there is one: ``(0, 1, ..., None, ...)``."""
    return tuple(i if i < n_old else None for i in range(n_new))


def newest_aligned_index(t_new: int, t_old: int) -> tuple[int | None, ...]:
    """Time steps counted from the newest frame: new step ``t`` keeps old step ``t_old - t_new + t``."""
    return tuple(t_old - t_new + t if t_old - t_new + t >= 0 else None for t in range(t_new))


def time_channel_index(t_new: int, c_new: int, t_old: int, c_old: int) -> tuple[int | None, ...]:
    """A flattened time-major ``(t, c)`` axis, index ``t * C + c``: steps newest-aligned, channels prefix."""
    times = newest_aligned_index(t_new, t_old)
    out = []
    for t in range(t_new):
        for c in range(c_new):
            old_t = times[t]
            out.append(old_t * c_old + c if old_t is not None and c < c_old else None)
    return tuple(out)


def fields_then_grid_index(c_new: int, c_old: int, grid: int) -> tuple[int | None, ...]:
    """``c_new`` data channels (prefix) followed by ``grid`` coordinate channels, which keep theirs."""
    return prefix_index(c_new, c_old) + tuple(c_old + j for j in range(grid))


__all__ = ["DimMap", "prefix_index", "newest_aligned_index", "time_channel_index", "fields_then_grid_index"]

"""The spectral-weight marker: how a layer tells optimizer hooks which of its parameters act on
Fourier modes and how many modes they keep (μP for spectral weights, docs/models.md §5).

A layer opts in by defining one method (no base class, no import of opzoo needed)::

    class MySpectralConv(nn.Module):
        def spectral_weights(self, spatial_dims):
            # [(parameter, kept modes per spatial dim), ...]
            return [(self.weight, (self.modes,) * spatial_dims)]

``spatial_dims`` is the number of spatial dims of the model the layer sits in (the model's
``config.spatial_dims``), for layers such as DPOT's Fourier attention whose FFT follows the input;
layers that know their own dims may ignore it. The number of kept modes of a weight is
``N = prod(modes)``. :func:`find_spectral_weights` collects every marked weight of a model with its
parameter name; opzoo-mup's ``mup-fno`` hook scales exactly these weights.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Protocol, Sequence, runtime_checkable

from torch import nn

from ..errors import ConfigError

__all__ = ["SpectralLayer", "SpectralWeight", "find_spectral_weights"]


@runtime_checkable
class SpectralLayer(Protocol):
    """A module with spectral weights: ``spectral_weights(spatial_dims) -> [(param, modes)]``."""

    def spectral_weights(self, spatial_dims: int | None) -> Iterable[tuple[nn.Parameter, Sequence[int]]]: ...


@dataclasses.dataclass(frozen=True)
class SpectralWeight:
    """One spectral weight of a model: its parameter name, the parameter and its kept modes per dim."""

    name: str
    param: nn.Parameter
    modes: tuple[int, ...]

    @property
    def n_modes(self) -> int:
        """``N = prod(modes)``, the number of kept Fourier modes."""
        return math.prod(self.modes)


def find_spectral_weights(model: nn.Module, spatial_dims: int | None = None) -> list[SpectralWeight]:
    """Every weight a :class:`SpectralLayer` inside ``model`` marks, in parameter order.

    ``spatial_dims`` defaults to ``model.config.spatial_dims`` when the model has one. A marked
    tensor that is not a parameter of ``model``, malformed modes, or one parameter marked twice
    with different modes is a :class:`~opzoo.ConfigError` naming the layer.
    """
    if spatial_dims is None:
        spatial_dims = getattr(getattr(model, "config", None), "spatial_dims", None)
    names = {id(p): n for n, p in model.named_parameters()}
    found: dict[int, SpectralWeight] = {}
    for layer_name, module in model.named_modules():
        if not isinstance(module, SpectralLayer) or not callable(getattr(module, "spectral_weights", None)):
            continue
        where = f"{type(module).__name__} {layer_name or '(model)'}"
        for entry in module.spectral_weights(spatial_dims):
            try:
                param, modes = entry
            except (TypeError, ValueError):
                raise ConfigError(f"{where}.spectral_weights(): expected (parameter, modes) pairs, got {entry!r}") from None
            if id(param) not in names:
                raise ConfigError(f"{where}.spectral_weights(): a marked tensor of shape {list(param.shape)} "
                                  "is not a parameter of the model")
            modes = tuple(modes) if isinstance(modes, (tuple, list)) else (modes,)
            if not modes or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in modes):
                raise ConfigError(f"{where}.spectral_weights(): modes of {names[id(param)]} must be positive ints, "
                                  f"got {modes!r}")
            weight = SpectralWeight(names[id(param)], param, modes)
            previous = found.get(id(param))
            if previous is not None and previous.modes != modes:
                raise ConfigError(f"{weight.name}: marked as spectral twice with different modes "
                                  f"{previous.modes} and {modes}")
            found[id(param)] = weight
    order = {n: i for i, n in enumerate(names.values())}
    return sorted(found.values(), key=lambda w: order[w.name])

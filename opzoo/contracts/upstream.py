"""What a plugin gives ``opzoo benchmark`` to time an upstream implementation side by side with opzoo's.

A plugin registers ``registry.register_upstream(name, backbone=..., build=fn)``; ``fn(model, x)`` receives the
opzoo model (its config says the sizes) and an input ``x`` ``[B, *S, T_in, C]``, and returns an :class:`Upstream` computing the same network on the
same data, or raises :class:`opzoo.UpstreamUnavailable` saying why not (the package is not installed, or the
model is not the network that code computes)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass
class Upstream:
    """``module(inputs(x))`` is the upstream network on opzoo's input ``x`` ``[B, *S, T_in, C]``.

    ``inputs`` converts once, before any timing (the upstream's own data pipeline would do it); ``outputs``
    picks the prediction from what ``module`` returns when that is not a tensor (e.g. DPOT's ``(pred, cls)``).
    ``label`` names the code and version, e.g. ``"the_well 1.2.0 FNO"``."""

    label: str
    module: Any  # torch.nn.Module
    inputs: Callable[[Any], Any] = lambda x: x
    outputs: Callable[[Any], Any] = lambda y: y

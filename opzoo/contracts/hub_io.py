"""Where :class:`opzoo.Backbone`'s ``save_pretrained``, ``push_to_hub`` and ``from_pretrained`` find model_io's
functions: the package installs them (``opzoo/__init__``), so that the contracts, below ``model_io`` in the layers,
import nothing above them (as the registry gets its plugin host). No torch here: ``import opzoo`` stays fast."""

from __future__ import annotations

from typing import Callable

_hub_io_source: "Callable[[str], Callable] | None" = None


def set_hub_io_source(source: "Callable[[str], Callable]") -> None:
    """``source(name)`` returns model_io's ``save_pretrained``, ``push_to_hub`` or ``from_pretrained``: the package
    installs it (``opzoo/__init__``), so that the contracts, below ``model_io``, import nothing above them (as the
    registry gets its plugin host)."""
    global _hub_io_source
    _hub_io_source = source


def hub_io(name: str) -> "Callable":
    if _hub_io_source is None:  # only a copy of this module outside its package can get here
        raise RuntimeError("opzoo's model I/O is not installed: import opzoo")
    return _hub_io_source(name)

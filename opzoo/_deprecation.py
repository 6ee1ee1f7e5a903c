"""Old call forms kept for one release behind a DeprecationWarning (the version policy in CHANGELOG.md)."""

from __future__ import annotations

import functools
import warnings
from importlib import import_module
from typing import Any, Callable, Mapping


def renamed_arguments(renames: Mapping[str, str]) -> Callable[[Callable], Callable]:
    """A decorator: keyword ``old`` still works as ``renames[old]``, with a DeprecationWarning naming the new
    keyword; giving both is a TypeError."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {old}= (deprecated) and {new}=")
                    warnings.warn(f"{fn.__name__}({old}=...) is deprecated; use {new}= (removed in the next release)",
                                  DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return call

    return wrap


def moved_module(old: str, new: str, renamed: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """For a module ``old`` that moved to ``new``: warn once as it is imported, and return its ``__getattr__``, which
    takes every name from ``new``; ``renamed`` maps an old name to its new one there (``"module:name"`` for a name
    that went to another module)."""
    warnings.warn(f"{old} is deprecated; import {new} (or the public names in opzoo.__all__); removed in the next "
                  "release", DeprecationWarning, stacklevel=3)

    def __getattr__(name: str) -> Any:
        module, _, attr = (renamed or {}).get(name, name).rpartition(":")
        return getattr(import_module(module or new), attr)

    return __getattr__

"""Old call forms kept for one release behind a DeprecationWarning (the version policy in CHANGELOG.md)."""

from __future__ import annotations

import functools
import warnings
from typing import Callable, Mapping


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

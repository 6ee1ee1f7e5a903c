"""Exceptions raised by opzoo.data.

Every message names the file, the key inside it, and the expected and found shapes, so that a bad
file can be fixed without opening a debugger.
"""

from __future__ import annotations

from opzoo.errors import OpzooError


class DataFormatError(OpzooError, ValueError):
    """A file is not in the layout it claims (or in any known layout), or a key has the wrong shape."""


class UnknownLayoutError(DataFormatError):
    """No known layout matches a file; the message lists what was found and what each layout expects."""


class NonFiniteDataError(DataFormatError):
    """A read window contains NaN or Inf values."""


class GeneratorError(OpzooError, RuntimeError):
    """A PDE generator failed (for example the solution blew up); nothing is written."""


def describe_shape(shape) -> str:
    """Format a shape tuple as ``[a, b, c]``."""
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"

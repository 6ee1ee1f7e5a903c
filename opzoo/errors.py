"""Exceptions raised by opzoo. Each message names the file, key, field or shape at fault."""

from __future__ import annotations

import difflib
from typing import Iterable


class OpzooError(Exception):
    """Base class of opzoo's own errors."""


class OpzooNotice(UserWarning):
    """A fact the user should know at the moment it applies (a license that restricts weights being loaded): a
    warning for the library's caller, a ``note:`` line on the command line."""


class UnknownNameError(OpzooError, KeyError):
    """A model, component or converter name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.4)
        msg = f"unknown {kind} {name!r}."
        if close:
            msg += f" Closest registered: {', '.join(close)}."
        elif known:
            shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
            msg += f" Registered: {shown}."
        else:
            msg += f" No {kind}s are registered (are the opzoo plugins installed? try `opzoo plugins`)."
        super().__init__(msg)
        self.kind, self.name, self.suggestions = kind, name, close

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class RegistryConflictError(OpzooError):
    """Two plugins registered the same name; ``owners``: the one that has it and the one that asked for it."""

    def __init__(self, message: str, owners: tuple[str, str] | None = None):
        super().__init__(message)
        self.owners = owners


class ConfigError(OpzooError, ValueError):
    """A config.json or config override that does not fit the model's ModelConfig."""


class WeightsError(OpzooError, ValueError):
    """A weights file whose tensors do not match the model (missing, extra or mis-shaped)."""


class HubError(OpzooError, OSError):
    """A repository that cannot be found or fetched."""


class CheckpointError(OpzooError, ValueError):
    """A foreign checkpoint that cannot be converted (unsafe, malformed or of another layout)."""


class UpstreamUnavailable(OpzooError):
    """An upstream implementation that cannot be run side by side: not installed, or not the same computation."""


class ExportRefused(OpzooError):
    """``opzoo export --format onnx|pt2`` refused a model: its graph cannot be made, or differs from the model
    (nothing was written)."""

"""Calling a plugin's code (a reader's ``detect``, a metric's ``parts``) so that it cannot take a command down: under
a deadline, its failures one line naming the plugin's package and version (:class:`PluginCallError`), for the caller
to leave that reader or metric out and go on with the others.

The deadline is ``OPZOO_PLUGIN_DEADLINE`` seconds (default :data:`DEFAULT_DEADLINE`) per call. A call runs in a daemon
thread the caller waits for; one that does not answer in time is abandoned (Python cannot stop a thread: it runs on,
its result unused, until the process ends). Nothing here imports torch.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

from ..errors import OpzooError

DEFAULT_DEADLINE = 60.0  # seconds a plugin's call may take
DEADLINE_ENV = "OPZOO_PLUGIN_DEADLINE"


class PluginCallError(OpzooError):
    """A plugin's reader or metric that raised, answered wrongly or not in time (one line, naming its package)."""


def plugin_deadline() -> float:
    """``OPZOO_PLUGIN_DEADLINE`` (seconds > 0), or :data:`DEFAULT_DEADLINE`; a malformed value is a one-line error."""
    text = os.environ.get(DEADLINE_ENV, "")
    if not text:
        return DEFAULT_DEADLINE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise OpzooError(f"{DEADLINE_ENV}={text!r}: seconds a plugin's call may take, a number > 0")
    return value


def plugin_label(kind: str, name: str) -> str:
    """``metric 'x' of package-name 1.2`` (the distribution that registered it, and its installed version)."""
    from importlib.metadata import PackageNotFoundError, version

    from .registry import live_registry

    registry = live_registry()
    owner = "?"
    if registry is not None:
        try:
            owner = registry.owner(kind, name)
        except KeyError:
            pass
    try:
        owner_version = version(owner) if owner not in ("?", "opzoo") else ""
    except PackageNotFoundError:
        owner_version = ""
    return f"{kind} {name!r} of {owner}" + (f" {owner_version}" if owner_version else "")


def is_plugins(kind: str, name: str) -> bool:
    """Whether a plugin registered ``name`` in the running host's registry (the core's own readers and metrics, and
    those a caller passes without registering them, are called directly: their errors are the caller's)."""
    from .registry import live_registry

    registry = live_registry()
    if registry is None:
        return False
    try:
        return registry.owner(kind, name) != "opzoo"
    except KeyError:
        return False


def call_plugin(fn: Callable, *args: Any, what: str, deadline: float | None = None) -> Any:
    """``fn(*args)`` within ``deadline`` seconds (default :func:`plugin_deadline`); its exception, or its silence, a
    :class:`PluginCallError` saying ``what`` (:func:`plugin_label`) and why."""
    seconds = plugin_deadline() if deadline is None else deadline
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True, name=f"opzoo plugin call: {what}")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise PluginCallError(f"{what}: no answer within {seconds:g} s ({DEADLINE_ENV} sets the deadline)")
    if "error" in box:
        e = box["error"]
        text = " ".join(str(e).split())[:200]
        raise PluginCallError(f"{what}: raised {type(e).__name__}" + (f" ({text})" if text else ""))
    return box.get("value")


__all__ = ["DEADLINE_ENV", "DEFAULT_DEADLINE", "PluginCallError", "call_plugin", "is_plugins", "plugin_deadline",
           "plugin_label"]

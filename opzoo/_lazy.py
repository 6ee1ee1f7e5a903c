"""Lazy exports of a package (PEP 562): names imported from their modules on first use, so that
``import opzoo`` (and the ``opzoo`` command line's parser) needs no torch."""

from __future__ import annotations

import warnings
from importlib import import_module
from typing import Any, Callable, Mapping


def lazy_exports(package: str, table: Mapping[str, str], namespace: dict[str, Any],
                 deprecated: Mapping[str, tuple[str, str, str]] | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps an exported name to the module that
    defines it (absolute, or relative to ``package``); a value, once imported, is cached in ``namespace``
    (the package's ``globals()``).

    ``deprecated`` maps an old name to ``(module, new name, removal note)``: the old name still works,
    with a DeprecationWarning naming its replacement on every access (so it is never cached).
    """
    deprecated = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        if name in deprecated:
            module, new, note = deprecated[name]
            warnings.warn(f"{package}.{name} is deprecated; use {module}.{new} ({note})", DeprecationWarning,
                          stacklevel=2)
            return getattr(import_module(module, package), new)
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]

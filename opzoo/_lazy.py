"""Lazy exports of a package (PEP 562): names imported from their modules on first use, so that
``import opzoo`` (and the ``opzoo`` command line's parser) needs no torch."""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping


def lazy_exports(package: str, table: Mapping[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps an exported name to the module that
    defines it (absolute, or relative to ``package``); a value, once imported, is cached in ``namespace``
    (the package's ``globals()``)."""

    def __getattr__(name: str) -> Any:
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

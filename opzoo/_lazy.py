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


def typed_imports(module_file: str) -> dict[str, str]:
    """``{name: module}`` of the ``from MODULE import name`` statements under a package's ``if TYPE_CHECKING:``: the
    one place a lazy export is written (readers and IDEs follow it there; :func:`lazy_exports` imports it from the
    same module on first use). Read from the source with ``ast``: no import runs."""
    import ast
    from pathlib import Path

    table: dict[str, str] = {}
    for node in ast.parse(Path(module_file).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if not isinstance(imp, ast.ImportFrom):
                    raise TypeError(f"{module_file}: only `from MODULE import NAME` belongs under TYPE_CHECKING")
                table |= dict.fromkeys((a.asname or a.name for a in imp.names), "." * imp.level + (imp.module or ""))
    return table


__all__ = ["lazy_exports", "typed_imports"]

"""`opzoo`, `opzoo.data` and `opzoo.training` export their names lazily (issue 27: start-up): every
name in ``__all__`` resolves, and importing the packages loads no torch."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["opzoo", "opzoo.data", "opzoo.training", "opzoo.evaluation"])
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing
    assert set(module.__all__) <= set(dir(module))


def test_importing_the_packages_and_building_the_parser_loads_no_torch():
    code = ("import sys, opzoo, opzoo.data, opzoo.training, opzoo.evaluation; from opzoo.cli import build_parser; "
            "build_parser(plugin_commands=False); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("package", ["opzoo", "opzoo.data", "opzoo.training", "opzoo.evaluation"])
def test_every_lazy_name_can_be_followed_by_a_reader(package):
    """Issue 44: the names were defined only through ``__getattr__``, so an IDE or a reader could not follow them; each
    package names every lazy export's module under ``if TYPE_CHECKING:``, the same module ``__getattr__`` imports."""
    import ast
    from pathlib import Path

    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__).read_text())
    typed = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                source = "." * imp.level + (imp.module or "")
                typed |= {a.name: source for a in imp.names}
    resolved = {name: importlib.import_module(where, package).__name__ for name, where in module._LAZY.items()}
    assert {n: importlib.import_module(s, package).__name__ for n, s in typed.items()} == resolved

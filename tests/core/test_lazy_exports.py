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

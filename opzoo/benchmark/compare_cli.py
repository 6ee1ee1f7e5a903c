"""Moved to :mod:`opzoo.cli.benchmark` (every command module is in ``opzoo/cli/``, the top layer); this path warns for a release.
``python -m opzoo.benchmark.compare_cli compare MODELS --data FILE --out DIR`` still runs ``opzoo compare MODELS --data FILE --out DIR``."""

import sys

from .._deprecation import moved_module

__getattr__ = moved_module("opzoo.benchmark.compare_cli", "opzoo.cli.benchmark", {"add_compare_command": "add_commands", "main": "opzoo.cli:main"})

if __name__ == "__main__":
    sys.exit(__getattr__("main")())

"""Moved to :mod:`opzoo.cli.data` (every command module is in ``opzoo/cli/``, the top layer); this path warns for a release.
``python -m opzoo.data.cli data generate ns --n 8 --out ns.h5`` still runs ``opzoo data generate ns --n 8 --out ns.h5``."""

import sys

from .._deprecation import moved_module

__getattr__ = moved_module("opzoo.data.cli", "opzoo.cli.data", {"add_data_commands": "add_commands", "run_generate": "cmd_data_generate", "run_inspect": "cmd_data_inspect", "main": "opzoo.cli:main"})

if __name__ == "__main__":
    sys.exit(__getattr__("main")())

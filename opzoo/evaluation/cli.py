"""Moved to :mod:`opzoo.cli.evaluation` (every command module is in ``opzoo/cli/``, the top layer); this path warns for a release.
``python -m opzoo.evaluation.cli eval MODEL --data FILE`` still runs ``opzoo eval MODEL --data FILE``."""

import sys

from .._deprecation import moved_module

__getattr__ = moved_module("opzoo.evaluation.cli", "opzoo.cli.evaluation", {"add_evaluation_commands": "add_commands", "main": "opzoo.cli:main"})

if __name__ == "__main__":
    sys.exit(__getattr__("main")())

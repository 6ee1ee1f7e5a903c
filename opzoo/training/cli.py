"""Moved to :mod:`opzoo.cli.training` (every command module is in ``opzoo/cli/``, the top layer); this path warns for a release.
``python -m opzoo.training.cli pretrain CONFIG`` still runs ``opzoo pretrain CONFIG``."""

import sys

from .._deprecation import moved_module

__getattr__ = moved_module("opzoo.training.cli", "opzoo.cli.training", {"add_training_commands": "add_commands", "main": "opzoo.cli:main"})

if __name__ == "__main__":
    sys.exit(__getattr__("main")())

"""Moved to :mod:`opzoo.console` (the console sits at the bottom of the layers, so that the command groups of
``data``, ``training``, ``evaluation`` and ``benchmark`` import down to it); this path warns for a release."""

from .._deprecation import moved_module

__getattr__ = moved_module("opzoo.cli.common", "opzoo.console")

"""Deprecated: ``opzoo.host.registry`` moved to :mod:`opzoo.registry.registry` (issue 44: the registry and the plugin host are
two layers). Importing it still works for one release, with a DeprecationWarning; every name resolves to the new
module's."""

import warnings
from importlib import import_module

warnings.warn("opzoo.host.registry is deprecated; import opzoo.registry.registry (or the public names in opzoo.__all__); "
              "removed in the next release", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(import_module("opzoo.registry.registry"), name)

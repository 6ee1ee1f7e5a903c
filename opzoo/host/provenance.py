"""Deprecated: ``opzoo.host.provenance`` moved to :mod:`opzoo.registry.provenance` (issue 44: the registry and the plugin host are
two layers). Importing it still works for one release, with a DeprecationWarning; every name resolves to the new
module's."""

import warnings
from importlib import import_module

warnings.warn("opzoo.host.provenance is deprecated; import opzoo.registry.provenance (or the public names in opzoo.__all__); "
              "removed in the next release", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(import_module("opzoo.registry.provenance"), name)

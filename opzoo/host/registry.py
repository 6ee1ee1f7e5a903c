"""Deprecated: ``opzoo.host.registry`` moved to :mod:`opzoo.registry.registry` (issue 44: the registry and the plugin host are
two layers); it still imports, with a DeprecationWarning, for one release."""

from .._deprecation import moved_module

__getattr__ = moved_module(__name__, "opzoo.registry.registry")

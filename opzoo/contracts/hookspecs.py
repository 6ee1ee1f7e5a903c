"""The hooks a plugin may implement (docs/architecture.md, Plugins). Hooks take keyword arguments only.

A plugin is a module (or object) named by an entry point in the group ``opzoo``::

    [project.entry-points.opzoo]
    my_plugin = "my_package.plugin"

and marks its implementations with :data:`opzoo.hookimpl`.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "opzoo"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def opzoo_register_components(registry):
    """Register mixers, feed-forwards, residuals, block layouts, backbones, optimizer hooks and checkpoint converters.

    Called for every plugin before any ``opzoo_register_models``, so presets may use components
    of other plugins. ``registry`` is a :class:`opzoo.registry.registry.Registry`.
    """


@hookspec
def opzoo_register_models(registry):
    """Register presets: a checkpoint family, declared as one table, with ``registry.register_family(family)``
    (:class:`opzoo.CheckpointFamily`: one preset per row), or one preset with ``registry.register_model(name,
    backbone=..., args=..., ...)``."""


@hookspec
def opzoo_register_commands(subparsers):
    """Add sub-commands to the ``opzoo`` command line.

    ``subparsers`` is the ``argparse`` sub-parsers action of ``opzoo``: add a parser with
    ``subparsers.add_parser(name, help=...)`` and give it ``set_defaults(func=fn)``, where
    ``fn(args) -> int`` is the exit code. Raise :class:`opzoo.OpzooError` for a user's mistake:
    it is printed as one line and the exit code is 2. A name another plugin (or the core)
    already uses is an error naming both.
    """

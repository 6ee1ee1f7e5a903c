"""The ``opzoo`` command line (README.md, Command line), the top layer. Every command module here is of one style:
``add_commands(subparsers)`` adds its commands, each handled by ``cmd_<name>(args) -> int``, which parses nothing
more and calls the library; a failure is an exception, made one line in one place (:func:`opzoo.console.run_command`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .._version import __version__
from ..console import Parser, run_parser
from ..errors import OpzooError


def build_parser(plugin_commands: bool = True) -> argparse.ArgumentParser:
    """The ``opzoo`` parser; ``plugin_commands=False`` leaves out the commands plugins add, which would
    import every plugin (and torch): ``opzoo --help`` then names the plugins from their entry-point
    metadata instead, and a core command never needs them."""
    parser = Parser(prog="opzoo", description="A zoo of neural operators for time-dependent PDEs.")
    parser.add_argument("--version", action="version", version=f"opzoo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    for add_commands in _command_providers():
        add_commands(sub)
    if plugin_commands:
        from ..host.plugins import get_plugin_host

        get_plugin_host().add_commands(sub)
    else:
        names = _plugin_distributions()
        if names:
            parser.epilog = (f"Installed plugins ({', '.join(names)}) may add commands; they are not imported for "
                             f"--help: `opzoo plugins` lists them, `opzoo COMMAND --help` shows one.")
    return parser


def _plugin_distributions() -> list[str]:
    """Distributions with an ``opzoo`` entry point, from metadata only (nothing is imported)."""
    from importlib.metadata import entry_points

    from ..contracts.hookspecs import PROJECT_NAME  # the entry-point group opzoo.host.plugins discovers

    return sorted({ep.dist.name if ep.dist is not None else ep.name for ep in entry_points(group=PROJECT_NAME)})


CORE_COMMANDS = frozenset({"list", "info", "verify", "plugins", "new-plugin", "export", "convert", "push", "data", "pretrain",
                           "finetune", "eval", "rollout", "validate", "fit", "benchmark", "compare", "cards"})


def _command_providers():
    """The core's command modules, in the order ``opzoo --help`` lists them."""
    from . import benchmark, data, evaluation, models, training

    return tuple(module.add_commands for module in (models, data, training, evaluation, benchmark))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:  # before any parser is built: no plugin, no torch
        print(f"opzoo {__version__}")
        return 0
    # a core command (or the top-level --help) needs no plugin imported; anything else may be a plugin's
    core = not args or args[0] in ("-h", "--help") or args[0] in CORE_COMMANDS
    try:
        parser = build_parser(plugin_commands=not core)
    except OpzooError as e:  # two plugins (or a plugin and the core) claiming one command: one line, exit 2
        print(f"opzoo: error: {e}", file=sys.stderr)
        return 2
    try:
        return run_parser(parser, args)
    except BrokenPipeError:  # e.g. `opzoo list | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def __getattr__(name: str):
    """The model commands' handlers and ``preset_document`` lived here until they moved to :mod:`opzoo.cli.models`:
    the old names still resolve for a release, with a DeprecationWarning."""
    if name in ("preset_document", "_preset_info", "_offline_of") or name.startswith("cmd_"):
        from importlib import import_module

        value = getattr(import_module("opzoo.cli.models"), name, None)
        if value is not None:
            import warnings

            warnings.warn(f"opzoo.cli.{name} is deprecated; use opzoo.cli.models.{name} (removed in the next release)",
                          DeprecationWarning, stacklevel=2)
            return value
    raise AttributeError(f"module 'opzoo.cli' has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())

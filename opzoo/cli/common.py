"""What the ``opzoo`` command line and its command groups (``opzoo.data.cli``, ``opzoo.training.cli``)
share: ``--set key=value`` overrides and running a parser with one-line errors."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Sequence

from ..errors import OpzooError


def parse_overrides(pairs: Sequence[str] | None) -> dict:
    """``["key=value", ...]`` -> dict; values are JSON when they parse as JSON (numbers, true,
    lists, objects), else strings. Shared by every command's ``--set``."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise OpzooError(f"override {pair!r} is not of the form key=value")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """``--help`` shows every option's default (as ``ArgumentDefaultsHelpFormatter``), except where the
    help text already says it or there is none to show (None, False, empty)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default is None or default is False or default is argparse.SUPPRESS
                or default == [] or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help shows defaults (sub-commands' too: pass it as ``parser_class``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """A usage mistake is one line on stderr (exit code 2), pointing at ``--help`` for the usage."""
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def run_parser(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; an opzoo error is one line on stderr and exit code 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, which points at its own --help
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    args.command_line = shlex.join([parser.prog, *argv])  # as typed, for model cards
    try:
        return int(args.func(args) or 0)
    except OpzooError as e:
        print(f"{parser.prog} {args.command}: error: {e}", file=sys.stderr)
        return 2


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub-)parser of the command ``args`` ran: ``opzoo finetune``'s, ``opzoo data inspect``'s..."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, sub.dest, None) if sub is not None else None
        if chosen not in (sub.choices if sub is not None else {}):
            return parser
        parser = sub.choices[chosen]


def command_group_main(add_commands, prog: str, argv: Sequence[str] | None = None) -> int:
    """``python -m opzoo.<group>.cli ...``: one command group on its own."""
    parser = Parser(prog=prog)
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser))
    return run_parser(parser, argv)


__all__ = ["Parser", "DefaultsHelpFormatter", "parse_overrides", "run_parser", "command_group_main"]

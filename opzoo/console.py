"""The console, at the bottom of the layers (it imports only ``errors`` and ``disk_full``): what the ``opzoo``
command line's modules (``opzoo.cli``) share: the parser, ``--set key=value`` overrides, running a command with one-line errors
(the one place that rule lives), the header lines a command says, and the data options' help."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Sequence

from .errors import OpzooError, OpzooNotice


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
    """Parse ``argv`` and run the chosen command, every command's failures as one line (:func:`run_command`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, which points at its own --help
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    args.command_line = shlex.join([parser.prog, *argv])  # as typed, for model cards
    args.command_path = _chosen_parser(parser, args).prog  # e.g. "opzoo data generate", for its error lines
    return run_command(args, parser.prog)


def run_command(args: argparse.Namespace, prog: str = "opzoo") -> int:
    """``args.func(args)`` with the one rule for a command's failures: an opzoo error, a full disk and a lost rank of a
    distributed run are one line on stderr (exit 2); a stop by SIGTERM/SIGINT (``RunStopped``) its own line and code;
    Ctrl-C exit 130 with ``args.interrupt_advice(args)`` when the command has one. What opzoo logs at INFO (how a model
    was adapted to the data, ...) is shown on stdout by the main rank."""
    import logging

    is_main = os.environ.get("RANK", "0") == "0"
    where = getattr(args, "command_path", None) or f"{prog} {args.command}"
    shown = logging.getLogger("opzoo")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = shown.level
    if is_main:
        shown.addHandler(handler)
        shown.setLevel(logging.INFO)
    said = warnings.showwarning
    warnings.showwarning = _said_warning  # a user's terminal gets the words, not a source line
    try:
        return int(args.func(args) or 0)
    except OpzooError as e:
        if is_main or not _stopped(e):
            print(f"{where}: error: {folded(e)}" if not _stopped(e) else str(e), file=sys.stderr)
        return e.exit_code if _stopped(e) else 2
    except KeyboardInterrupt:
        advice = getattr(args, "interrupt_advice", None)
        print(f"{where}: interrupted{advice(args) if advice else ''}", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as e:
        line = _one_line(e, args)
        if line is None:
            raise
        print(f"{where}: error: {line}", file=sys.stderr)
        return 2
    finally:
        warnings.showwarning = said
        shown.removeHandler(handler)
        shown.setLevel(level)


def _said_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning during a command, on stderr as one line: ``note:`` for a license notice, ``warning:`` for others'
    of opzoo and its plugins, with the category for any other library's."""
    if os.environ.get("RANK", "0") != "0":
        return
    text = " ".join(str(message).split())
    if issubclass(category, OpzooNotice):
        head = "note"
    elif issubclass(category, UserWarning) and "opzoo" in str(filename):
        head = "warning"
    else:
        head = f"warning ({category.__name__}, {os.path.basename(str(filename))}:{lineno})"
    print(f"{head}: {text}", file=file or sys.stderr)


def folded(e: BaseException) -> str:
    """An error's message as one line: a message that lists on several lines (the tensors a checkpoint lacks, ...)
    keeps its first line and the rest joined by ``; ``."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "") if lines else type(e).__name__


def _stopped(e: BaseException) -> bool:
    """A run stopped by a signal (``opzoo.training.RunStopped``): said as it is, with its own exit code."""
    return type(e).__name__ == "RunStopped" and hasattr(e, "exit_code")


def _one_line(e: BaseException, args: argparse.Namespace) -> str | None:
    """The line for a full disk or a distributed failure (a timeout or a lost peer), else None (a bug: shown in full)."""
    from .disk_full import is_disk_full

    if isinstance(e, OSError) and is_disk_full(e):
        where = e.filename or getattr(args, "out", None) or "the run directory"
        return (f"disk full writing {where}: free space and re-run the same command (a training run resumes from its "
                f"last checkpoint)")
    if isinstance(e, RuntimeError) and _distributed_failure(e):
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        return (f"distributed run failed: a rank did not answer in time (distributed.timeout_s) or left "
                f"({type(e).__name__}: {first[:300]}); every rank stops here. Check that every rank is alive, then "
                f"re-run the same command: the run resumes from its last checkpoint")
    return None


def _distributed_failure(e: BaseException) -> bool:
    """Whether ``e`` is torch.distributed's (a timeout or a lost peer), not a bug to show in full."""
    text = str(e)
    if "clients joined" in text or "Connection closed by peer" in text or (
            "gloo" in text.lower() and "timed out" in text.lower()):
        return True
    dist = sys.modules.get("torch.distributed")  # only a run that imported it can have failed in it
    kinds = tuple(k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None)) if k)
    return bool(kinds) and isinstance(e, kinds)


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub-)parser of the command ``args`` ran: ``opzoo finetune``'s, ``opzoo data inspect``'s..."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, sub.dest, None) if sub is not None else None
        if chosen not in (sub.choices if sub is not None else {}):
            return parser
        parser = sub.choices[chosen]


LAYOUT_HELP = ("the data files' layout when detection cannot tell (see `opzoo data inspect`): canonical, "
               "pdebench-groups, pdebench-cfd, pdebench-tensor, fno-mat, the-well, array (.npy/.npz/.pt as "
               "[N, *S, T, C]) or array:<axes>, e.g. array:NTXYC, or a layout a plugin registers (`opzoo plugins` "
               "lists them) (default: detected)")
FIELDS_HELP = ("the names of a plain array's channels (or of a canonical file's that names none), in order, "
               "comma-separated (e.g. u,v); a .npz or .pt with one array per field names them itself")


FIELD_MAP_HELP = ("read the file's fields as the model's, FILE=MODEL pairs, comma-separated (e.g. u=velocity_x,"
                  "v=velocity_y); docs/data-contract.md")
TRAINING_SET_HELP = ("read the file as the model's upstream read its training set NAME (its field expressions, "
                     "transposes and constants; `opzoo info MODEL` and docs/data-contract.md list them); a file of "
                     "The Well that names one is read so by default, 'none' reads it by name")


def add_fit_options(parser: argparse.ArgumentParser) -> None:
    """``--field-map`` and ``--training-set``: how a command that fits data to a model reads the file's fields (the
    one fit: :func:`opzoo.evaluation.fit.fit_data`)."""
    parser.add_argument("--field-map", metavar="FILE=MODEL,...", help=FIELD_MAP_HELP)
    parser.add_argument("--training-set", metavar="NAME", help=TRAINING_SET_HELP)


def add_run_data_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``opzoo finetune`` that decide what its run does with the files (windows, splits, the model's
    input window, ``--set``): shared by ``opzoo fit --finetune``, whose block is the run's."""
    parser.add_argument("--batch-size", type=int, default=8, help="trajectory windows per step")
    parser.add_argument("--in-timesteps", type=int, help="input window T_in, adapting the model's time aggregation")
    parser.add_argument("--train-trajectories", type=at_least(1), metavar="N",
                        help="train on the first N trajectories of each file's training split only (in file order: a "
                             "smaller N's are the first of a larger N's, as opzoo compare's cells); default: all of "
                             "them")
    parser.add_argument("--validation-fraction", type=float, default=0.0, metavar="F",
                        help="hold out this fraction of each file's trajectories, just before the test split, for "
                             "validation: never trained on; the run keeps the weights of its best validation step "
                             "(--select) and may stop early (--early-stopping); default: no validation split")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (batches, noise, initialization)")
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE",
                        help="override run config values, e.g. model.args.normalization=stats")


def fields_of(args: argparse.Namespace) -> list[str] | None:
    """``--fields a,b``: the channels' names of a plain array."""
    value = getattr(args, "fields", None)
    return [f.strip() for f in value.split(",") if f.strip()] if value else None


def say(line: str) -> None:
    """A header line of a command, printed by the main rank of a distributed run only."""

    if os.environ.get("RANK", "0") == "0":
        print(line, flush=True)


def at_least(minimum: int):
    """An argparse ``type``: an integer >= ``minimum`` (a bad value is argparse's one-line error, exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def output_file(path: str, flag: str = "--out") -> Path:
    """``path`` checked as a file a command will write, before it does any work (a directory there, or a file where
    its directory goes, is a one-line error, not a traceback after the results are computed)."""
    out = Path(path)
    if out.is_dir():
        raise OpzooError(f"{flag} {out}: a directory; name the file to write (e.g. {out / 'results.csv'})")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise OpzooError(f"{flag} {out}: {parent} is a file, not a directory")
    return out


__all__ = ["Parser", "DefaultsHelpFormatter", "at_least", "output_file", "parse_overrides", "run_parser", "run_command",
           "LAYOUT_HELP", "FIELDS_HELP", "FIELD_MAP_HELP", "TRAINING_SET_HELP", "add_fit_options", "fields_of", "say",
           "TUNE_HELP", "MAX_MEMORY_HELP", "add_tune_options"]


TUNE_HELP = ("what to train: full (every parameter), head (input and output projections, norms, time aggregation; "
             "the rest frozen) or lora[:RANK] (low-rank adapters through peft on the model's linear layers and "
             "convolutions, rank 8 by default; saved merged into plain weights, the adapter beside them); tensors "
             "adapted to your data are always trained (default: full)")
MAX_MEMORY_HELP = ("GiB a training step may hold at its peak; a run that would need more is refused before it starts, "
                   "naming what makes it fit (default: what the device has free)")


def add_tune_options(p, scratch_note: bool = False) -> None:
    """``--tune`` and ``--max-memory``: ``opzoo finetune``'s and ``opzoo compare``'s (``scratch_note``: a compare's
    cells from random init and its baseline train every parameter)."""
    note = "; in a compare, the cells from a model's weights (from random init and the baseline: full)"
    p.add_argument("--tune", default="full", metavar="full|head|lora[:RANK]",
                   help=TUNE_HELP + (note if scratch_note else ""))
    p.add_argument("--max-memory", type=float, metavar="GB", help=MAX_MEMORY_HELP)

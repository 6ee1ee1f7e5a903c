"""The ``opzoo compare`` command: parses its arguments and calls :func:`opzoo.benchmark.compare.compare`."""

from __future__ import annotations

import argparse
import sys

from ..console import FIELDS_HELP, LAYOUT_HELP, add_fit_options, fields_of, say


def cmd_compare(args) -> int:
    from .compare import CompareOptions, compare, report

    if args.report:
        report(args.report, say)
        return 0
    if not args.models or not args.data or not args.out:
        from ..errors import ConfigError

        raise ConfigError("name the models, --data FILE [FILE ...] and --out DIR (or --report DIR)")
    options = CompareOptions(
        trajectories=tuple(int(n) for n in str(args.trajectories).split(",") if n.strip()), steps=args.steps,
        seeds=args.seeds, baseline=args.baseline, scratch=args.scratch, batch_size=args.batch_size, lr=args.lr,
        test_fraction=args.test_fraction, horizon=args.horizon, layout=args.layout, fields=fields_of(args),
        field_map=args.field_map, training_set=args.training_set)
    compare(args.models, args.data, args.out, options, say, getattr(args, "command_line", "") or "")
    return 0


def add_compare_command(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="which model for my data: fine-tune every model on your files under one budget (from its "
                        "weights and from scratch, at nested numbers of training trajectories, beside an FNO from "
                        "scratch), score them on the same held-out trajectories, and write tables, gains and plots")
    p.add_argument("models", nargs="*", help="presets, hf-hub:org/repo or saved model directories")
    p.add_argument("--data", nargs="+", help="your data file(s), as `opzoo finetune` takes them")
    p.add_argument("--out", help="the compare's directory: one run directory per cell, the scores and the report")
    p.add_argument("--trajectories", default="2,8,32", help="training trajectories per file, comma-separated (nested)")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps per cell: the budget every model gets")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--baseline", help="the model every other is measured against, trained from scratch (default: an "
                                      "FNO of the data's dimension, fno-1d/2d/3d)")
    p.add_argument("--scratch", action=argparse.BooleanOptionalAction, default=True,
                   help="also train each model from random init (--no-scratch: from its weights only)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, help="max lr of every cell (default: each model's recommended fine-tuning lr)")
    p.add_argument("--test-fraction", type=float, default=0.1, help="the last fraction of each file held out")
    p.add_argument("--horizon", type=int, help="rollout steps scored (default: every remaining frame)")
    p.add_argument("--layout", help=LAYOUT_HELP)
    p.add_argument("--fields", help=FIELDS_HELP)
    add_fit_options(p)
    p.add_argument("--report", metavar="DIR", help="re-render DIR's report from its finished cells (trains nothing)")
    p.set_defaults(func=cmd_compare)


def main(argv=None) -> int:
    from ..console import command_group_main

    return command_group_main(add_compare_command, "python -m opzoo.benchmark.compare_cli", argv)


if __name__ == "__main__":
    sys.exit(main())

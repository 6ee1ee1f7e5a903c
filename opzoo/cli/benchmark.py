"""``opzoo benchmark`` and ``opzoo compare``: parse the arguments, call :mod:`opzoo.benchmark`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..console import FIELDS_HELP, LAYOUT_HELP, add_fit_options, add_tune_options, at_least, fields_of, output_file, say
from ..errors import ConfigError


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--model-kwargs {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def cmd_benchmark(args) -> int:
    from ..benchmark.presets import benchmark

    rows = benchmark(args.models, out=output_file(args.out), model_kwargs=dict(map(_key_value, args.model_kwargs)),
                     resolution=args.resolution, batch=args.batch_size, repeats=args.repeats,
                     max_gflop=args.max_gflop, threads=args.threads, with_upstream=not args.no_upstream)
    return 1 if any(r.note.startswith("failed") for r in rows) else 0


def cmd_compare(args) -> int:
    from ..benchmark.compare import CompareOptions, compare, parse_functions, parse_trajectories, report

    if args.report:
        return report(args.report, say).exit_code
    if not args.models or not args.data or not args.out:
        raise ConfigError("name the models, --data FILE [FILE ...] and --out DIR (or --report DIR)")
    options = CompareOptions(
        trajectories=parse_trajectories(args.trajectories), steps=args.steps, seeds=args.seeds, baseline=args.baseline,
        scratch=args.scratch, batch_size=args.batch_size, lr=args.lr, test_fraction=args.test_fraction,
        validation_fraction=args.validation_fraction, baseline_steps=args.baseline_steps, patience=args.patience,
        evaluations=args.evaluations, horizon=args.horizon, at_frame=args.at_frame,
        functions=parse_functions(args.functions), layout=args.layout, fields=fields_of(args),
        field_map=args.field_map, training_set=args.training_set, tune=args.tune, max_memory=args.max_memory)
    result = compare(args.models, args.data, args.out, options, say, getattr(args, "command_line", "") or "",
                     jobs=args.jobs, new=args.new, plan_file=args.plan)
    return 0 if result is None else result.exit_code


def add_commands(subparsers) -> None:
    """Add ``benchmark`` and ``compare`` to the ``opzoo`` command's sub-parsers."""
    p = subparsers.add_parser("benchmark", help="parameters, FLOPs, activation memory, CPU time per step (beside the "
                                                "upstream code where installed), H100 estimates: CSV + Markdown")
    p.add_argument("models", nargs="+", help="glob patterns of presets (e.g. '*-micro', 'well-fno-*')")
    p.add_argument("--out", default="benchmark.csv", help="the CSV written (the Markdown table goes beside it, .md)")
    p.add_argument("--batch-size", type=at_least(1), default=2)
    p.add_argument("--resolution", type=int, nargs="+", help="the spatial grid (default: each preset's pretrained grid); a model "
                                                      "tied to its grid (img_size) is built at this one, as fine-tuning "
                                                      "adapts it")
    p.add_argument("--model-kwargs", nargs="*", default=[], metavar="KEY=VALUE",
                   help="config overrides for every model (JSON values), e.g. fourier_blocks=applied")
    p.add_argument("--repeats", type=at_least(1), default=5, help="timed rounds (after one warm-up round)")
    p.add_argument("--max-gflop", type=float, default=100.0,
                   help="time only presets whose training step is at most this many GFLOP (all are counted)")
    p.add_argument("--threads", type=at_least(1), help="torch intra-op threads (default: torch's)")
    p.add_argument("--no-upstream", action="store_true", help="do not time upstream implementations")
    p.set_defaults(func=cmd_benchmark)

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
    p.add_argument("--baseline-steps", type=int, help="the baseline's own budget, a cap: it stops early on "
                                                      "validation (default: 5 x --steps)")
    p.add_argument("--patience", type=int, default=5, help="validation evaluations without improvement before the "
                                                           "baseline stops")
    p.add_argument("--evaluations", type=int, default=10, help="validation evaluations in --steps steps (each a "
                                                               "checkpoint; every cell keeps its best)")
    p.add_argument("--scratch", action=argparse.BooleanOptionalAction, default=True,
                   help="also train each model from random init (--no-scratch: from its weights only)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, help="max lr of every cell (default: each model's recommended fine-tuning lr)")
    p.add_argument("--test-fraction", type=float, default=0.1, help="the last fraction of each file held out for "
                                                                   "testing")
    p.add_argument("--validation-fraction", type=float, default=0.1,
                   help="the fraction before the test split held out for validation: the same for every cell, "
                        "never trained on; it selects each cell's weights and stops the baseline")
    p.add_argument("--horizon", type=int, help="rollout steps scored (default: every remaining frame)")
    p.add_argument("--at-frame", type=int, metavar="K", help="the predicted frame of Poseidon's error, the gains' "
                                                            "(1: the first; default: the last)")
    p.add_argument("--functions", metavar="F[+G],...", help="Poseidon's functions as field names: components of one "
                   "function joined by '+', functions by ',' (e.g. u+v,p); default: vector components named _x/_y/_z "
                   "form one, every other field its own")
    p.add_argument("--layout", help=LAYOUT_HELP)
    p.add_argument("--fields", help=FIELDS_HELP)
    add_fit_options(p)
    add_tune_options(p, scratch_note=True)
    p.add_argument("--jobs", type=int, default=1, help="cells trained at once, each in a process of its own, the "
                                                       "threads divided between them")
    p.add_argument("--plan", metavar="FILE", help="write each cell's `opzoo finetune` command to FILE, one per line, "
                                                  "for a scheduler (trains nothing; then --report OUT)")
    p.add_argument("--new", action="store_true", help="move what --out holds aside (to OUT.replaced-<time>) and "
                                                      "start again")
    p.add_argument("--report", metavar="DIR", help="re-render DIR's report from its finished cells, scoring those "
                                                   "trained by --plan's commands (trains nothing)")
    p.set_defaults(func=cmd_compare)
    p.epilog = ("exit codes: 0 every cell finished; 1 the report is written but some cell was refused, failed or has "
                "not run (its row says why); 2 refused before any cell (nothing written); 128+N stopped by signal N "
                "(re-run the same command to resume)")


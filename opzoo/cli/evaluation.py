"""``opzoo eval``, ``rollout``, ``validate`` and ``fit``: parse the arguments, call :mod:`opzoo.evaluation`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from ..console import (
    FIELDS_HELP,
    LAYOUT_HELP,
    add_fit_options,
    add_run_data_options,
    at_least,
    fields_of,
    output_file,
    say,
)
from ..errors import OpzooError


def _sets_boundary(model_args: Sequence[str] | None) -> bool:
    """Whether ``--model-args`` set the model's boundary (``periodic``, ``boundaries``: kept then, where the data
    state another)."""
    from ..console import parse_overrides
    from ..model_io.adapt import BOUNDARY_FIELDS

    return bool(set(BOUNDARY_FIELDS) & set(parse_overrides(model_args)))


def _load_model(name: str, pretrained: bool | None, model_args: Sequence[str] | None = None):
    """The model a command runs (``model_args``: ``KEY=VALUE`` config overrides), and print the header line saying
    which weights those are."""
    from ..console import parse_overrides
    from ..model_io.loading import load
    from ..model_io.pretrained import resolve_weights

    pretrained, weights = resolve_weights(name, pretrained)
    overrides = parse_overrides(model_args)
    model = load(name, pretrained=pretrained, **overrides).eval()
    say(f"weights: {weights}")  # once they have loaded: weights refused are never first announced
    if overrides:
        say("model args: " + ", ".join(f"{k}={v!r}" for k, v in overrides.items()))
    return model


EVAL_FILES = ("eval.json", "eval.csv", "eval_per_step.csv", "eval_windows.json", "error-vs-step.png",
              "expert-load.png")


def _claim_out_dir(out: Path, model: str, new: bool) -> None:
    """``--out`` may hold results of this same model (re-evaluated, overwritten), not another's, unless
    ``--new`` moves them aside; and nothing but what ``eval`` writes (the one output-directory rule)."""
    from ..errors import ConfigError
    from ..files import claim_output_dir, move_aside, read_json

    def written_by_eval(p: Path) -> bool:
        return p.name in EVAL_FILES or p.name.endswith("-panels.png")

    claim_output_dir(out, written_by_eval, force=new, what="the evaluation's results",
                     advice=f"pass --new to move what it holds aside (to {out}.replaced-<time>)")
    if new and out.is_dir() and any(not written_by_eval(p) for p in out.iterdir()):
        print(f"moved the previous contents of {out} to {move_aside(out)}")
        return
    found = [out / n for n in ("eval.json", "eval_windows.json") if (out / n).is_file()]
    if not found:
        return
    owners = set()
    for f in found:
        try:
            owners.add(read_json(f, "an evaluation's results").get("model"))
        except (ConfigError, AttributeError):
            owners.add(None)
    from ..evaluation.run import model_identity

    if owners == {model_identity(model)}:
        return
    if not new:
        who = ", ".join(sorted(str(o) for o in owners if o)) or "a model it does not name"
        raise OpzooError(f"{out} holds evaluation results of {who}; pass --new to move them aside "
                         f"(to {out}.replaced-<time>), or choose another --out")
    moved = move_aside(out)
    print(f"moved the previous results in {out} to {moved}")


MODEL_ARGS_HELP = ("config fields of the model to set, e.g. normalization=stats (the weights must still fit; what "
                   "changes no tensor)")


def cmd_eval(args) -> int:
    from ..evaluation.run import evaluate_files

    _claim_out_dir(Path(args.out), args.model, args.new)
    model = _load_model(args.model, args.pretrained, args.model_args)
    return evaluate_files(model, args.model, args.data, args.out, resolution=args.resolution, layout=args.layout,
                          fields=fields_of(args), windows=args.windows, horizon=args.horizon,
                          batch_size=args.batch_size, split=args.split, test_fraction=args.test_fraction,
                          include_training=args.include_training, max_trajectories=args.max_trajectories,
                          skip_bad_trajectories=args.skip_bad_trajectories, channel=args.channel,
                          plot_steps=args.plot_steps, say=say, field_map=args.field_map,
                          training_set=args.training_set, keep_boundary=_sets_boundary(args.model_args))


def cmd_rollout(args) -> int:
    from ..evaluation.run import rollout_trajectory

    if args.steps is not None and args.steps < 1:
        raise OpzooError(f"--steps must be >= 1, got {args.steps}")
    model = _load_model(args.model, args.pretrained, args.model_args)
    return rollout_trajectory(model, args.model, args.data, index=args.index, steps=args.steps,
                              resolution=args.resolution, layout=args.layout, fields=fields_of(args), plot=args.plot,
                              save=args.save, channel=args.channel, plot_steps=args.plot_steps, say=say,
                              field_map=args.field_map, training_set=args.training_set,
                              keep_boundary=_sets_boundary(args.model_args))


def cmd_fit(args) -> int:
    """``opzoo fit``: how a model reads the files (the fit block), without running the model."""
    from ..evaluation.fit import fit_files_block

    if args.finetune:
        return fit_finetune(args)
    given = [flag for flag, key, default in (("--batch-size", "batch_size", 8), ("--in-timesteps", "in_timesteps", None),
                                             ("--train-trajectories", "train_trajectories", None),
                                             ("--validation-fraction", "validation_fraction", 0.0),
                                             ("--seed", "seed", 0), ("--set", "set", []))
             if getattr(args, key) != default]
    if given:
        raise OpzooError(f"{', '.join(given)}: finetune's options, which change the fit a fine-tune makes: add "
                         f"--finetune to see that fit")
    model = _load_model(args.model, args.pretrained, args.model_args)
    fit_files_block(model, args.data, args.resolution, args.layout, fields_of(args), say=say,
                    field_map=args.field_map, training_set=args.training_set, test_fraction=args.test_fraction,
                    name=args.model, keep_boundary=_sets_boundary(args.model_args))
    return 0


def fit_finetune(args) -> int:
    """``opzoo fit --finetune``: the lines and the fit block ``opzoo finetune`` prints for the same arguments, from
    the run's own preparation (:func:`opzoo.training.build.prepare_run_data`), without training or writing."""
    from ..training.build import prepare_run_data
    from .training import finetune_run

    run = argparse.Namespace(**vars(args))
    run.test_fraction = 0.1 if args.test_fraction is None else args.test_fraction
    run.set = [*args.set, *(f"model.args.{pair}" for pair in args.model_args or [])]
    run.out, run.steps, run.lr, run.select, run.early_stopping, run.eval_every = "fit-preview", 500, None, None, None, \
        None
    cfg, model = finetune_run(run)
    prepare_run_data(cfg, model, say)
    return 0


def cmd_validate(args) -> int:
    from ..evaluation.validate import validate

    out = output_file(args.out)
    rows = validate(args.models, args.data, out, layout=args.layout, horizon=args.horizon, split=args.split,
                    test_fraction=args.test_fraction, batch_size=args.batch_size,
                    max_trajectories=args.max_trajectories, field_map=args.field_map,
                    training_set=args.training_set)
    failed = [r for r in rows if r.status != "ok"]
    print(f"wrote {out}: {len(rows) - len(failed)} scored, {len(failed)} failed")
    if len(rows) - len(failed) > 1:
        print("  nRMSE_minus_first: a row's nRMSE minus the first model's on the same file and trajectories, with its "
              "paired 95 % bootstrap interval (_lo, _hi); below 0: better than the first model")
    for r in failed:
        print(f"  failed: {r.model} on {r.file}: {r.reason}")
    return 1 if failed else 0  # a table with a failed row is not a complete result


def add_commands(subparsers) -> None:
    """Add ``eval``, ``rollout``, ``validate`` and ``fit`` to the ``opzoo`` command's sub-parsers."""
    for name, helptext in (("eval", "roll out a model over whole trajectories: l2 full, per-step error, plots"),
                           ("rollout", "roll out one trajectory and plot ground truth / prediction / error")):
        p = subparsers.add_parser(name, help=helptext)
        p.add_argument("model", help="preset or alias, hf-hub:org/repo[@rev], local-dir:PATH or a saved repo dir (e.g. RUN/model)")
        p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=None,
                       help="the preset's published weights; --no-pretrained: random init "
                            "(default: published weights when the preset has some)")
        p.add_argument("--resolution", type=int, nargs="+", help="resize data to this (default: the model's)")
        p.add_argument("--plot-steps", type=int, nargs="+", default=[1, 5, 10], help="rollout steps in the panels")
        p.add_argument("--channel", type=int, default=0, help="channel shown in the panels")
        p.add_argument("--layout", help=LAYOUT_HELP)
        p.add_argument("--fields", help=FIELDS_HELP)
        add_fit_options(p)
        p.add_argument("--model-args", nargs="*", metavar="KEY=VALUE", help=MODEL_ARGS_HELP)
        if name == "eval":
            p.add_argument("--data", nargs="+", required=True)
            p.add_argument("--out", default="eval_out", help="directory of the CSV/JSON results and PNG plots")
            p.add_argument("--horizon", type=at_least(1), help="rollout steps (default: whole trajectories)")
            p.add_argument("--batch-size", type=at_least(1), help="trajectories rolled out at once (default 8); with --windows "
                                                           "all, windows per batch (default: the model's "
                                                           "pretrained_cfg.test_batch_size, else 8)")
            p.add_argument("--windows", choices=("first", "all"), default="first",
                           help="first: roll out from the first T_in frames of each trajectory; all: predict one step "
                                "from every window of every trajectory, pooled over the files in order, as a mean of "
                                "batch means (The Well's test protocol on its test files, for well-* models)")
            p.add_argument("--split", choices=("test", "train", "all"),
                           help="which trajectories of each file. Default: for a file the model trained on (its "
                                "record, matched by content), the held-out part it records; else all. test: that "
                                "held-out part, or for other files training's rule (the last --test-fraction); "
                                "train / all: need --include-training on a file the model trained on")
            p.add_argument("--test-fraction", type=float,
                           help="as finetune's --test-fraction (default 0.1), for files the model records no "
                                "training on")
            p.add_argument("--new", action="store_true",
                           help="--out holds another model's results: move them aside (to OUT.replaced-<time>)")
            p.add_argument("--include-training", action="store_true",
                           help="allow --split train/all to score trajectories the model trained on (labelled so)")
            p.add_argument("--max-trajectories", type=at_least(1), help="score only the first N trajectories of the split")
            p.add_argument("--skip-bad-trajectories", action="store_true",
                           help="leave out trajectories with NaN/Inf values (counted and listed) instead of refusing")
            p.set_defaults(func=cmd_eval)
        else:
            p.add_argument("--data", required=True)
            p.add_argument("--index", type=int, default=0, help="trajectory index")
            p.add_argument("--steps", type=int, help="rollout steps (default: to the end of the trajectory)")
            p.add_argument("--plot", help="PNG path for the panels")
            p.add_argument("--save", help="write the prediction to a safetensors file")
            p.set_defaults(func=cmd_rollout)

    p = subparsers.add_parser("validate", help="score many models on the same files (same split and metrics): one "
                                               "CSV row per model and file, persistence alongside")
    p.add_argument("models", nargs="+", help="glob patterns of presets with published weights (e.g. '*-micro'), or "
                                             "model references")
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--out", default="validate.csv", help="the CSV written")
    p.add_argument("--layout", help=LAYOUT_HELP)
    add_fit_options(p)
    p.add_argument("--horizon", type=at_least(1), help="rollout steps (default: whole trajectories)")
    p.add_argument("--split", choices=("test", "all"), help="as eval's --split (default: the held-out part of a file "
                                                           "a model trained on, else all); every model is scored on "
                                                           "the trajectories no model trained on")
    p.add_argument("--test-fraction", type=float, help="as eval's --test-fraction")
    p.add_argument("--batch-size", type=at_least(1), default=8)
    p.add_argument("--max-trajectories", type=at_least(1), help="score only the first N trajectories of the split")
    p.set_defaults(func=cmd_validate)

    p = subparsers.add_parser("fit", help="say how a model reads your files: fields, channels, grid, boundary and "
                                          "normalization, as eval, finetune, rollout and validate will (the model is "
                                          "not run)")
    p.add_argument("model", help="preset or alias, hf-hub:org/repo[@rev], local-dir:PATH or a saved repo dir")
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=None,
                   help="the preset's published weights (default: when it has some)")
    p.add_argument("--resolution", type=int, nargs="+", help="run at this grid (default: the model's choice)")
    p.add_argument("--layout", help=LAYOUT_HELP)
    p.add_argument("--fields", help=FIELDS_HELP)
    p.add_argument("--test-fraction", type=float, help="statistics a normalization needs come from the rest of each "
                                                       "file (default 0.1 held out)")
    add_fit_options(p)
    p.add_argument("--model-args", nargs="*", metavar="KEY=VALUE", help=MODEL_ARGS_HELP)
    p.add_argument("--finetune", action="store_true",
                   help="the fit `opzoo finetune` makes with these arguments (it may adapt the model's channels to "
                        "the file's fields, and takes statistics from the training split): the lines and block it "
                        "prints, without training; the options below are finetune's")
    add_run_data_options(p)
    p.set_defaults(func=cmd_fit)


"""``opzoo pretrain`` and ``opzoo finetune``: parse the arguments, call :mod:`opzoo.training` (under torchrun:
``torchrun --nproc_per_node=N -m opzoo pretrain CONFIG``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..console import (
    FIELDS_HELP,
    LAYOUT_HELP,
    add_fit_options,
    add_run_data_options,
    add_tune_options,
    at_least,
    fields_of,
    parse_overrides,
    say,
)


def _is_main() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"


def _resume_advice(args) -> str:
    """What re-running an interrupted training command does: resume from its last checkpoint, if it wrote one."""
    if args.command not in ("pretrain", "finetune"):
        return ""
    try:
        if args.command == "finetune":
            run = Path(args.out)
        else:
            from ..training.config import read_document

            run = Path(args.output_dir or read_document(args.config).get("output_dir", "runs/run"))
        from ..training.checkpoint import list_checkpoints

        has = bool(list_checkpoints(run / "checkpoints"))
    except Exception:  # the advice must not fail the interrupt: say the general rule
        return "; re-run the same command to resume from its last checkpoint, if it wrote one"
    return ("; re-run the same command to resume from its last checkpoint" if has else
            "; no checkpoint was written yet, so re-running the same command starts it over")


def _report(result, finetune: bool = False, from_scratch: bool = False) -> None:
    """The end-of-run summary; ``finetune``: step 0 against the end, named zero-shot / fine-tuned, or
    random init / trained ``from_scratch``, with the persistence baseline."""
    if not _is_main() or result.already_finished:
        return
    last = result.evals.get(result.steps)
    first = result.evals.get(0)
    print(f"trained {result.steps} steps -> {result.run_dir}")
    if finetune and last and first:
        from ..evaluation.rollouts import headline

        before, after = ("random init", "trained") if from_scratch else ("zero-shot", "fine-tuned")
        for r in last:
            z = next(f for f in first if f.name == r.name)
            print(f"  test l2 {r.name} ({before} -> {after}; persistence):")
            for label, a, b, p in _horizon_rows(z, r):
                change = f" ({100 * (b - a) / a:+.1f} %)" if a else ""
                print(f"    {label}: {a:#.4g} -> {b:#.4g}{change}" + (f"; persistence {p:#.4g}" if p is not None else ""))
            what, _, _, note = headline(r)
            if note:
                print(f"    headline: {what}: {note}")
    elif last:
        for r in last:
            before = next((f.l2_full for f in first if f.name == r.name), None) if first else None
            extra = f" (initial {before:.4g}, {before / r.l2_full:.1f}x lower)" if before else ""
            print(f"  test l2 full {r.name}: {r.l2_full:.4g}{extra}")
    if result.model_dir:
        print(f"  model: {result.model_dir}")
    if result.divergence:
        print(f"  warning: {result.divergence}")


def _horizon_rows(zero, final):
    """``(label, step-0 value, final value, persistence)`` at the short horizons and the full rollout."""
    rows = []
    for h in sorted(final.short_horizons):
        if h in zero.short_horizons:
            p = final.persistence.short_horizons.get(h) if final.persistence else None
            rows.append((f"horizon {h}", zero.short_horizons[h], final.short_horizons[h], p))
    rows.append((f"full rollout ({final.horizon} steps)", zero.l2_full, final.l2_full,
                 final.persistence.l2_full if final.persistence else None))
    return rows


def cmd_pretrain(args) -> int:
    from ..training.config import load_run_config
    from ..training.trainer import Trainer

    overrides = parse_overrides(args.set)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    cfg = load_run_config(args.config, overrides)
    advice = thread_advice() if cfg.training.device in ("cpu", "auto") else None
    if advice:
        say(advice)
    _report(Trainer(cfg).fit(new=args.new))
    return 0


def thread_advice() -> str | None:
    """One line when torch's intra-op threads will likely fight the machine's other work: a CPU run, OMP_NUM_THREADS
    unset, and a load average above three quarters of the cores (measured: fine-tuning ran at 0.45 steps/s with 2 threads
    and 8.8 with one on a loaded 2-core machine)."""
    import os

    if os.environ.get("OMP_NUM_THREADS") or not hasattr(os, "getloadavg"):
        return None
    cores, load = os.cpu_count() or 1, os.getloadavg()[0]
    if cores < 2 or load <= 0.75 * cores:
        return None
    return (f"note: the machine is busy (load {load:.1f} on {cores} cores) and torch will use {cores} threads, which "
            f"can spin-wait on each other; OMP_NUM_THREADS=1 is often many times faster then")


def cmd_finetune(args) -> int:
    from ..training.trainer import Trainer

    cfg, model = finetune_run(args)
    trainer = Trainer(cfg, model)
    trainer.command = args.command_line
    result = trainer.fit(new=args.new)
    _report(result, finetune=True, from_scratch=not trainer.cfg.model.pretrained and not
            trainer.cfg.model.reference.saved)
    return 0


def finetune_run(args):
    """``(run config, model)`` of ``opzoo finetune``'s arguments, its header lines (the weights, the lr, the data's
    axis order) said once the model has loaded: weights refused are never first announced as the run's."""
    from ..training.build import build_run_model

    told: list[str] = []
    cfg = finetune_run_config(args, told.append)
    import torch

    from ..training.memory_plan import check_before_build

    check_before_build(cfg)  # a step that cannot fit is refused before the model is built at full size
    torch.manual_seed(cfg.seed)  # as the trainer seeds before it builds a model: one initialization for a seed
    model = build_run_model(cfg.model)
    for line in told:
        say(line)
    return cfg, model


def finetune_run_config(args, tell=lambda line: None):
    """The run config ``opzoo finetune``'s arguments ask for (``tell`` says the weights, the lr and the data's axis
    order as it goes): the one reading of those arguments, which ``opzoo compare``'s cell commands rely on."""
    from ..evaluation.fit import array_order_lines
    from ..model_io.pretrained import resolve_weights
    from ..model_io.reference import parse_model_reference
    from ..training.finetune import finetune_config, recommended_lr

    model = parse_model_reference(args.model)  # parsed once, here, and carried in the run config
    pretrained, weights = resolve_weights(model, args.pretrained)
    tell(f"weights: {weights}")
    advice = thread_advice()
    if advice:
        tell(advice)
    for line in array_order_lines(args.data, args.layout):
        tell(line)
    lr, why = (args.lr, "--lr") if args.lr is not None else recommended_lr(model, pretrained)
    tell(f"lr: {lr:g} ({why})")
    return finetune_config(model, args.data, args.out, steps=args.steps, batch_size=args.batch_size, lr=lr,
                           resolution=args.resolution, in_timesteps=args.in_timesteps,
                           test_fraction=args.test_fraction, pretrained=pretrained, layout=args.layout,
                           fields=fields_of(args), field_map=args.field_map, training_set=args.training_set,
                           train_trajectories=args.train_trajectories, validation_fraction=args.validation_fraction,
                           selection=args.select, early_stopping=args.early_stopping, eval_every=args.eval_every,
                           seed=args.seed, tune=getattr(args, "tune", "full"),
                           max_memory=getattr(args, "max_memory", None),
                           overrides=parse_overrides(args.set))


NEW_HELP = ("start a new run even if the directory holds one: its contents are first moved to "
            "<dir>.replaced-<time> (nothing is deleted); without it, a run resumes only under the config it "
            "was started with")


def add_commands(subparsers) -> None:
    """Add ``pretrain`` and ``finetune`` to the ``opzoo`` command's sub-parsers."""
    p = subparsers.add_parser("pretrain", help="train a model from a run config (YAML or JSON)")
    p.add_argument("config", help="run config, e.g. configs/micro-pot.yaml")
    p.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE",
                   help="override config values, e.g. training.steps=100")
    p.add_argument("--output-dir", help="override output_dir")
    p.add_argument("--new", action="store_true", help=NEW_HELP)
    p.set_defaults(func=cmd_pretrain, interrupt_advice=_resume_advice)

    p = subparsers.add_parser(
        "finetune", help="fine-tune a pretrained model on your data (HDF5 in any layout opzoo reads, or .npy/.npz/.pt "
                         "arrays; more channels, another resolution or T_in adapt its input/output layers); reports "
                         "zero-shot and fine-tuned errors")
    p.add_argument("model", help="preset or alias (with --no-pretrained for random init), hf-hub:org/repo[@rev], local-dir:PATH or a saved repo dir")
    p.add_argument("--data", nargs="+", required=True, help="your data file(s): HDF5 in any layout opzoo reads, or "
                                                               ".npy/.npz/.pt arrays with --layout array:<axes>")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--steps", type=int, default=500, help="optimizer steps")
    p.add_argument("--lr", type=float, help="max learning rate of the one-cycle schedule (default: the model's "
                                            "recommended finetune_lr in its pretrained_cfg; 1e-3 from random init)")
    p.add_argument("--resolution", type=int, nargs="+",
                   help="train at this resolution, adapting the model's positional embedding (default: the model's)")
    p.add_argument("--test-fraction", type=float, default=0.1, help="the last fraction of each file's trajectories "
                                                                   "held out for testing")
    p.add_argument("--select", choices=("last", "validation"),
                   help="which weights to keep: the last step's, or those with the lowest validation error (default: "
                        "validation with --validation-fraction, else last)")
    p.add_argument("--early-stopping", type=at_least(1), metavar="EVALS",
                   help="stop after this many evaluations in a row without a lower validation error")
    p.add_argument("--eval-every", type=at_least(1), metavar="STEPS",
                   help="steps between evaluations (of the validation split, or of the test split without one); "
                        "default: a fifth of --steps")
    p.add_argument("--layout", help=LAYOUT_HELP)
    p.add_argument("--fields", help=FIELDS_HELP)
    add_fit_options(p)
    add_run_data_options(p)
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=None,
                   help="start from the preset's published weights; --no-pretrained: random init "
                        "(default: published weights when the preset has some)")
    add_tune_options(p)
    p.add_argument("--new", action="store_true", help=NEW_HELP)
    p.set_defaults(func=cmd_finetune, interrupt_advice=_resume_advice)



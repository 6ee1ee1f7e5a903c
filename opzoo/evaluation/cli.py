"""Evaluation sub-commands of the ``opzoo`` CLI: ``eval``, ``rollout`` and ``validate``.

``add_evaluation_commands(subparsers)`` adds them to an argparse sub-parser group; every handler takes ``args`` and
returns an exit code (failures are one line: :func:`opzoo.cli.common.run_command`). ``python -m opzoo.evaluation.cli
eval MODEL --data FILE`` works on its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from ..cli.common import FIELDS_HELP, LAYOUT_HELP, command_group_main, fields_of, say
from ..errors import OpzooError


def _load_model(name: str, pretrained: bool | None):
    """The model a command runs, and print the header line saying which weights those are."""
    from ..model_io.loading import load
    from ..model_io.pretrained import resolve_weights

    pretrained, weights = resolve_weights(name, pretrained)
    say(f"weights: {weights}")
    return load(name, pretrained=pretrained).eval()


def _check_channel(channel: int, sources) -> None:
    """``--channel`` names a channel of every file (checked before any work: a bad one used to fail after scoring)."""
    for src in sources:
        if not 0 <= channel < src.channels:
            raise OpzooError(f"--channel {channel}: {src.path} has {src.channels} channel(s) "
                             f"({', '.join(f'{i} {n}' for i, n in enumerate(src.channel_names))})")


def _plot_path(plot: str, data: str, index: int) -> Path:
    """``--plot``: a PNG path, or an existing directory (or one ending in /) to write ``<file>-<index>.png`` into."""
    path = Path(plot)
    if path.is_dir() or plot.endswith(("/", "\\")):
        path.mkdir(parents=True, exist_ok=True)
        return path / f"{Path(data).stem}-{index}.png"
    return path


def _model_identity(name: str) -> str:
    """How eval results name the model they score: a directory by its resolved path, anything else as given."""
    from ..model_io.reference import parse_model_reference

    try:
        ref = parse_model_reference(name, backbones=False)
    except OpzooError:
        return str(name)
    return str(ref.path.resolve()) if ref.kind == "dir" else str(name)


def _claim_out_dir(out: Path, model: str, new: bool) -> None:
    """``--out`` may hold results of this same model (re-evaluated, overwritten), not another's, unless
    ``--new`` moves them aside."""
    from ..files import move_aside

    found = [out / n for n in ("eval.json", "eval_windows.json") if (out / n).is_file()]
    if not found:
        return
    owners = set()
    for f in found:
        try:
            owners.add(json.loads(f.read_text()).get("model"))
        except (OSError, ValueError, AttributeError):
            owners.add(None)
    if owners == {_model_identity(model)}:
        return
    if not new:
        who = ", ".join(sorted(str(o) for o in owners if o)) or "a model it does not name"
        raise OpzooError(f"{out} holds evaluation results of {who}; pass --new to move them aside "
                         f"(to {out}.replaced-<time>), or choose another --out")
    moved = move_aside(out)
    print(f"moved the previous results in {out} to {moved}")


def cmd_eval(args) -> int:
    from .bad_data import bad_trajectories_of
    from .fit import fit_files
    from .plots import plot_error_curves, plot_rollout_panels, rollout_title
    from .rollouts import evaluate_dataset, headline, metric_table, with_persistence, write_results
    from .splits import split_to_score
    from .vrmse import vrmse_fields

    _claim_out_dir(Path(args.out), args.model, args.new)
    model = _load_model(args.model, args.pretrained)
    model, frame_shape, sources = fit_files(model, args.data, args.resolution, args.layout, fields_of(args), say=say)
    _check_channel(args.channel, sources)
    split = [split_to_score(model, src, args.split, args.test_fraction, args.include_training) for src in sources]
    for path, (_, which) in zip(args.data, split):
        print(f"scoring {Path(path).name}: {which}")
    sources = [src for src, _ in split]
    if args.windows == "all":
        if args.skip_bad_trajectories:
            raise OpzooError("--skip-bad-trajectories does not apply with --windows all: The Well's test score takes "
                             "every window of every trajectory (it skips none); repair the file, or score whole "
                             "rollouts with --windows first --skip-bad-trajectories")
        bad_trajectories_of(sources, frame_shape, None, None, False, every_window=True)
        return _eval_every_window(args, model, frame_shape, sources, split)
    args.batch_size = args.batch_size or 8
    bad = bad_trajectories_of(sources, frame_shape, args.horizon, args.max_trajectories, args.skip_bad_trajectories)
    out = Path(args.out)
    results = []
    for path, src, (_, which), skipped in zip(args.data, sources, split, bad):
        name = Path(path).stem
        if skipped:
            print(f"{name}: skipped {len(skipped)} trajectory(ies) with NaN/Inf values: "
                  + ", ".join(f"{b.index} ({b.count} values)" for b in skipped))
        r, (truth, pred) = evaluate_dataset(model, name, src, frame_shape, args.horizon, batch_size=args.batch_size,
                                            max_trajectories=args.max_trajectories, keep_first=True,
                                            exclude=[b.position for b in skipped],
                                            vrmse_fields=vrmse_fields(model, src))
        with_persistence(r, src, frame_shape, args.horizon, batch_size=args.batch_size, max_trajectories=args.max_trajectories,
                         exclude=[b.position for b in skipped])
        results.append(r)
        for fname, v in r.vrmse.items():
            print(f"{name}: VRMSE {fname}: " + ", ".join(f"{k} {x:.4g}" for k, x in v.items()))
        shown = next(i for i in range(len(src)) if i not in {b.position for b in skipped})  # its position in src
        plot_rollout_panels(truth, pred, args.plot_steps, out / f"{name}-panels.png", channel=args.channel,
                            title=rollout_title(args.model, src, shown, args.channel))
        print(f"{name}: l2 full {r.l2_full:.4g} (persistence {r.persistence.l2_full:.4g}) over {r.n_trajectories} "
              f"trajectories ({which}{'' if args.max_trajectories is None else f', first {r.n_trajectories}'}), "
              f"horizon {r.horizon}")
        for h, v in sorted(r.short_horizons.items()):
            print(f"{name}: l2 at horizon {h}: {v:.4g} (persistence {r.persistence.short_horizons.get(h, float('nan')):.4g})")
        what, _, _, note = headline(r)
        if note:
            print(f"{name}: headline {what}: {note}")
        for line in metric_table(r):
            print(line)
    paths = write_results(results, out, stem="eval", model=_model_identity(args.model))
    plot_error_curves({r.name: r.per_step for r in results}, out / "error-vs-step.png",
                      persistence={r.name: r.persistence.per_step for r in results},
                      title=f"{args.model}: rollout error per step ({args.split or 'held-out or all'})")
    if any(r.expert_load for r in results):  # a model with routers: which PDE goes to which expert
        from .plots import plot_expert_load

        plot_expert_load({r.name: r.expert_load for r in results}, out / "expert-load.png")
    print(f"wrote {paths['json']}, {paths['csv']}, {paths['per_step_csv']} and PNG plots in {out}")
    return 0


def _eval_every_window(args, model, frame_shape, sources, split) -> int:
    """``opzoo eval --windows all``: one-step scores over every window, pooled over the files in order."""
    from ..files import strict_json
    from .rollouts import evaluate_windows
    from .vrmse import vrmse_fields

    cfg = model.pretrained_cfg or {}
    batch = args.batch_size or cfg.get("test_batch_size") or 8
    fields = vrmse_fields(model, sources[0])
    if fields is None or any(vrmse_fields(model, s) != fields for s in sources):
        raise OpzooError("--windows all pools the files, so they must hold the same named channels")
    where = "; ".join(which for _, which in split)
    r = evaluate_windows(model, sources, frame_shape, batch, fields, name=", ".join(Path(p).name for p in args.data))
    protocol = cfg.get("test_protocol")
    from_cfg = args.batch_size is None and cfg.get("test_batch_size")
    resampled = [s.path for s in sources if tuple(s.spatial) != tuple(frame_shape.resolution)]
    print(f"protocol: every window (T_in={frame_shape.in_timesteps} -> 1, stride 1) of {where}, {r.n_windows} windows in "
          f"file order, one-step scores as the mean of batch means (batch size {batch}"
          f"{', the model pretrained_cfg.test_batch_size' if from_cfg else ''}; the short last batch of "
          f"{r.dropped} window(s) left out, as The Well's DataLoader does with drop_last=True)")
    if protocol and not resampled:
        print(f"  this is {protocol}, when the files are that test split, in that order"
              + ("" if from_cfg else f"; note: its batch size is {cfg.get('test_batch_size')}, not {batch}"
                 if cfg.get("test_batch_size") else ""))
    elif protocol:
        print(f"  not {protocol}: the files were resampled to {'x'.join(map(str, frame_shape.resolution))} "
              f"({', '.join(map(str, resampled))}); compare it only with scores made the same way")
    else:
        print("  not an upstream's published protocol for this model: compare it only with scores made the same way")
    for name, v in r.vrmse.items():
        print(f"VRMSE {name}: {v:.4g} (persistence {r.persistence_vrmse[name]:.4g})")
    print(f"l2 one step: {r.l2:.4g} (persistence {r.persistence_l2:.4g})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"model": _model_identity(args.model), "protocol": "every window, one step, mean of batch means, the short "
           "last batch dropped", "upstream_protocol": None if resampled else protocol,
           "grid": list(frame_shape.resolution), "resampled_files": resampled,
           "files": list(args.data), "split": where, "n_windows": r.n_windows, "dropped_windows": r.dropped,
           "batch_size": r.batch_size,
           "vrmse": r.vrmse, "l2": r.l2, "persistence": {"vrmse": r.persistence_vrmse, "l2": r.persistence_l2}}
    (out / "eval_windows.json").write_text(json.dumps(strict_json(doc), indent=2, allow_nan=False))
    print(f"wrote {out / 'eval_windows.json'}")
    return 0


def cmd_rollout(args) -> int:
    import torch

    from .fit import fit_files
    from .l2 import l2_full, l2_per_step
    from .plots import plot_rollout_panels

    if args.steps is not None and args.steps < 1:
        raise OpzooError(f"--steps must be >= 1, got {args.steps}")
    model = _load_model(args.model, args.pretrained)
    model, frame_shape, (src,) = fit_files(model, [args.data], args.resolution, args.layout, fields_of(args), say=say)
    _check_channel(args.channel, [src])
    t_in = frame_shape.in_timesteps
    if not 0 <= args.index < len(src):
        raise OpzooError(f"{args.data}: --index {args.index} out of range; the file has {len(src)} trajectories")
    from .shape_check import check_frames

    check_frames(src, t_in, frame_shape.out_timesteps, None, "--steps")
    if args.steps is not None and args.steps < 1:
        raise OpzooError(f"--steps must be >= 1, got {args.steps}")
    from .bad_data import non_finite_in

    count, first = non_finite_in(src.read(args.index).numpy())
    if count:
        from ..data.errors import NonFiniteDataError

        raise NonFiniteDataError(f"non-finite data: {args.data}: trajectory {args.index} holds {count} NaN/Inf "
                                 f"value(s) (first in frame {first}); choose another --index (`opzoo data inspect "
                                 f"{args.data}` lists the trajectories with NaN/Inf)")
    steps = args.steps or src.n_steps - t_in
    avail = min(steps, src.n_steps - t_in)
    from ..data.transforms import resize_batch

    frames, mask = frame_shape.at(src.spatial).frames(src.read(args.index, 0, t_in + avail))  # the file's own grid
    with torch.no_grad():
        x = resize_batch(frames[None, ..., :t_in, :], frame_shape.resolution)
        pred = model.rollout(x, steps, **({} if bool(mask.all()) else {"channel_mask": mask}))
        pred = resize_batch(pred, src.spatial)[0]  # back to the file's grid, where it is scored and saved
    from .splits import trained_by

    who = trained_by(model, src, args.index)
    print(f"rolled out {steps} steps from trajectory {args.index} of {args.data}"
          + (f": SEEN IN TRAINING (by {who}), so its error is no held-out score" if who else ""))
    if avail >= 1:
        truth = frames[..., t_in:, :]
        p = pred[..., :avail, :]
        full = float(l2_full(p[None], truth[None], mask)[0])
        curve = l2_per_step(p[None], truth[None], mask)[0]
        print(f"  l2 full over the {avail} steps with ground truth: {full:.4g}; last step: {float(curve[-1]):.4g}")
        if args.plot:
            from .plots import rollout_title

            plot = _plot_path(args.plot, args.data, args.index)
            plot_rollout_panels(truth, p, args.plot_steps, plot, channel=args.channel,
                                title=rollout_title(args.model, src, args.index, args.channel))
            print(f"  plot: {plot}")
    if args.save:
        from safetensors.torch import save_file

        grid, ran = "x".join(map(str, src.spatial)), "x".join(map(str, frame_shape.resolution))
        metadata = {"file": str(Path(args.data).name), "trajectory": str(args.index), "grid": grid,
                    "model_grid": ran, "model": str(args.model), "channels": ",".join(src.channel_names),
                    "padded_channels": str(int((~mask).sum())), "seen_in_training": who or "no",
                    "axes": "[" + ", ".join([*"XYZ"[:len(src.spatial)], "T", "C"]) + "]"}
        save_file({"prediction": pred.contiguous(), "mask": mask}, args.save, metadata=metadata)
        print(f"  prediction [*S, steps, C] at the file's grid {grid}"
              + ("" if grid == ran else f" (the model ran at {ran})") + f" saved to {args.save}")
    return 0


def add_evaluation_commands(subparsers) -> None:
    """Add ``eval``, ``rollout`` and ``validate`` to an argparse sub-parser group."""
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
        if name == "eval":
            p.add_argument("--data", nargs="+", required=True)
            p.add_argument("--out", default="eval_out", help="directory of the CSV/JSON results and PNG plots")
            p.add_argument("--horizon", type=int, help="rollout steps (default: whole trajectories)")
            p.add_argument("--batch-size", type=int, help="trajectories rolled out at once (default 8); with --windows "
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
            p.add_argument("--max-trajectories", type=int, help="score only the first N trajectories of the split")
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
    from .validate import add_validate_command

    add_validate_command(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    return command_group_main(add_evaluation_commands, "python -m opzoo.evaluation.cli", argv)


if __name__ == "__main__":
    sys.exit(main())

"""Training sub-commands of the ``opzoo`` CLI: ``pretrain``, ``finetune``, ``eval``, ``rollout``.

``add_training_commands(subparsers)`` adds them to an argparse sub-parser group; every handler
takes ``args`` and returns an exit code. ``python -m opzoo.training.cli pretrain CONFIG`` works on
its own (also under ``torchrun --nproc_per_node=N -m opzoo.training.cli pretrain CONFIG``).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Sequence

from ..cli.common import command_group_main, parse_overrides
from ..errors import OpzooError


def _is_main() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"


def _one_line_errors(command):
    """A stop by SIGTERM/SIGINT and a full disk end a command with one line, not a traceback."""
    @functools.wraps(command)
    def run(args) -> int:
        import logging

        from ..disk_full import DiskFullError, is_disk_full
        from .stop import RunStopped

        shown = logging.getLogger("opzoo")
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        level = shown.level
        if _is_main():  # what opzoo reports at INFO (e.g. how a model was adapted to the data) is shown
            shown.addHandler(handler)
            shown.setLevel(logging.INFO)
        try:
            return command(args)
        except RunStopped as e:
            if _is_main():
                print(str(e), file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt:
            print(f"opzoo {args.command}: interrupted{_resume_advice(args)}", file=sys.stderr)
            return 130
        except RuntimeError as e:
            if isinstance(e, OpzooError) or not _distributed_failure(e):
                raise
            first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
            raise OpzooError(f"distributed run failed: a rank did not answer in time (distributed.timeout_s) or "
                             f"left ({type(e).__name__}: {first[:300]}); every rank stops here. Check that every "
                             f"rank is alive, then re-run the same command: the run resumes from its last "
                             f"checkpoint") from None
        except OSError as e:
            if isinstance(e, OpzooError) or not is_disk_full(e):
                raise
            where = e.filename or getattr(args, "out", None) or "the run directory"
            raise DiskFullError(f"disk full writing {where}: free space and re-run the same command "
                                f"(a training run resumes from its last checkpoint)") from None
        finally:
            shown.removeHandler(handler)
            shown.setLevel(level)
    return run


def _resume_advice(args) -> str:
    """What re-running an interrupted training command does: resume from its last checkpoint, if it wrote one."""
    if args.command not in ("pretrain", "finetune"):
        return ""
    try:
        if args.command == "finetune":
            run = Path(args.out)
        else:
            from .config import read_document

            run = Path(args.output_dir or read_document(args.config).get("output_dir", "runs/run"))
        from .checkpoint import list_checkpoints

        has = bool(list_checkpoints(run / "checkpoints"))
    except Exception:  # the advice must not fail the interrupt: say the general rule
        return "; re-run the same command to resume from its last checkpoint, if it wrote one"
    return ("; re-run the same command to resume from its last checkpoint" if has else
            "; no checkpoint was written yet, so re-running the same command starts it over")


def _distributed_failure(e: BaseException) -> bool:
    """Whether ``e`` is torch.distributed's (a timeout or a lost peer), not a bug to show in full."""
    import torch.distributed as dist

    kinds = tuple(k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None)) if k)
    text = str(e)
    return (kinds and isinstance(e, kinds)) or "clients joined" in text or "Connection closed by peer" in text \
        or ("gloo" in text.lower() and "timed out" in text.lower())


def _report(result, finetune: bool = False, from_scratch: bool = False) -> None:
    """The end-of-run summary; ``finetune``: step 0 against the end, named zero-shot / fine-tuned, or
    random init / trained ``from_scratch``, with the persistence baseline."""
    if not _is_main() or result.already_finished:
        return
    last = result.evals.get(result.steps)
    first = result.evals.get(0)
    print(f"trained {result.steps} steps -> {result.run_dir}")
    if finetune and last and first:
        from .evaluate import headline

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
    from .config import load_run_config
    from .trainer import Trainer

    overrides = parse_overrides(args.set)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    cfg = load_run_config(args.config, overrides)
    advice = thread_advice() if cfg.training.device in ("cpu", "auto") else None
    if advice:
        _header(advice)
    _report(Trainer(cfg).fit(new=args.new))
    return 0


def _header(line: str) -> None:
    if _is_main():
        print(line, flush=True)


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


def _say_array_order(paths: Sequence[str], layout: str | None) -> None:
    """A plain array carries no axis names: say how each one is read, and how to read it otherwise."""
    from ..data.readers.arrays import SUFFIXES

    for path in paths:
        if str(path).lower().endswith(SUFFIXES) and (layout or "array").partition(":")[0] == "array":
            from .build import open_trajectories

            src = open_trajectories(path, layout)
            axes = ["N", *"XYZ"[:len(src.spatial)], "T", "C"]
            how = src.source.info.axis_note or ("--layout " + layout if layout else "the canonical order")
            _header(f"data: {path} read as [{', '.join(axes)}] = {list(src.source.shape)} ({how}; another: --layout "
                    f"array:<axes>)")


def cmd_finetune(args) -> int:
    from ..model_io.builder import resolve_weights
    from .finetune import finetune_config, recommended_lr
    from .trainer import Trainer

    pretrained, weights = resolve_weights(args.model, args.pretrained)
    _header(f"weights: {weights}")
    advice = thread_advice()
    if advice:
        _header(advice)
    _say_array_order(args.data, args.layout)
    lr, why = (args.lr, "--lr") if args.lr is not None else recommended_lr(args.model, pretrained)
    _header(f"lr: {lr:g} ({why})")
    cfg = finetune_config(args.model, args.data, args.out, steps=args.steps, batch_size=args.batch_size, lr=lr,
                          resolution=args.resolution, in_timesteps=args.in_timesteps, test_fraction=args.test_fraction,
                          pretrained=pretrained, layout=args.layout, fields=_fields(args),
                          overrides=parse_overrides(args.set))
    trainer = Trainer(cfg)
    trainer.command = args.command_line
    _report(trainer.fit(new=args.new), finetune=True, from_scratch=not pretrained)
    return 0


def _load_model(name: str, pretrained: bool | None):
    """The model a command runs, and print the header line saying which weights those are."""
    from ..model_io.builder import load, resolve_weights

    pretrained, weights = resolve_weights(name, pretrained)
    _header(f"weights: {weights}")
    return load(name, pretrained=pretrained).eval()


def _fields(args) -> list[str] | None:
    """``--fields a,b``: the channels' names of a plain array."""
    value = getattr(args, "fields", None)
    return [f.strip() for f in value.split(",") if f.strip()] if value else None


FIELDS_HELP = ("the names of a plain array's channels, in order, comma-separated (e.g. u,v); a .npz or .pt with one "
               "array per field names them itself")


def _frame_shape_for(model, data_paths: Sequence[str], resolution, layout: str | None = None,
                     fields: list[str] | None = None):
    """``(model, frame shape, sources)``: the files opened, the grid chosen (and said), the model brought to a file's
    channel count when it takes any (the same rule as training: :func:`opzoo.training.build.choose_grid`)."""
    from .build import choose_grid, frame_shape, open_trajectories, select_model_fields

    _say_array_order(data_paths, layout)
    sources = [open_trajectories(p, layout, fields) for p in data_paths]
    select_model_fields(model, sources)
    grid = choose_grid(model, sources, resolution)
    res = grid.resolution
    for src in sources:
        if len(src.spatial) != len(res):
            axes = "XYZ"
            raise OpzooError(f"{src.path}: {len(src.spatial)}-D data {list(src.spatial)} (read as [N, "
                             f"{', '.join(axes[:len(src.spatial)])}, T, C]), but the model runs on {len(res)}-D grids "
                             f"{list(res)}; check the file's axis order (--layout array:<axes>) or use a "
                             f"{len(src.spatial)}-D model")
    model = _with_file_channels(model, sources)
    _header(grid.line(sources))
    return model, frame_shape(model, res), sources


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


def _with_file_channels(model, sources):
    """A model that takes any number of channels (``takes_any_channel_count``) at the files' own count, not padded."""
    if not getattr(model, "takes_any_channel_count", False):
        return model
    wanted = max(src.channels for src in sources)
    if wanted == model.config.in_channels:
        return model
    from ..model_io.adapt import adapt_model

    return adapt_model(model, in_channels=wanted, out_channels=wanted).eval()


def _bad_trajectories(sources, frame_shape, horizon, limit, skip: bool, every_window: bool = False) -> list[list]:
    """Per source, the trajectories with NaN/Inf in the frames a rollout reads; refused unless ``skip`` (with
    ``every_window``, The Well's protocol, skipping is no choice: the message says to repair the file)."""
    from ..data.errors import NonFiniteDataError
    from .bad_data import scan_trajectories
    from .shape_check import check_frames

    found = []
    for src in sources:
        frames = check_frames(src, frame_shape.in_timesteps, frame_shape.out_timesteps, horizon, "--horizon")
        bad = scan_trajectories(src, limit, frames)
        if bad and not skip:
            more = f" (and {len(bad) - 1} more trajectory(ies) in that file)" if len(bad) > 1 else ""
            advice = ("repair the file (--windows all scores every window, as The Well's test does)" if every_window
                      else "pass --skip-bad-trajectories to evaluate without them, or repair the file")
            raise NonFiniteDataError(f"non-finite data: {bad[0].describe()}{more}; {advice}")
        n = len(src) if limit is None else min(limit, len(src))
        if skip and len(bad) == n:
            raise NonFiniteDataError(f"{src.path}: every one of the {n} trajectories evaluated holds NaN/Inf values")
        found.append(bad)
    return found


def _vrmse_fields(model, src) -> dict[str, int] | None:
    """The channels VRMSE is reported for, by name: a model that names its time-varying fields gets
    those; otherwise every channel of the file (padded channels have none)."""
    names = src.channel_names
    wanted = model.pretrained_cfg.get("time_varying_fields") or names
    if len(set(names)) != len(names):
        return None  # unnamed or ambiguous channels: evaluate_dataset numbers them
    return {n: names.index(n) for n in wanted}


def _split_of(model, src, split: str | None, test_fraction: float | None, include_training: bool):
    """``(subset, label)``: the trajectories of ``src`` to score, chosen from what the model records it
    trained on (:func:`opzoo.training.seen_data.choose_split`)."""
    from .seen_data import choose_split

    indices, label, _ = choose_split(model, src, split, test_fraction, include_training)
    return (src if indices == list(range(len(src))) else src.subset(indices)), label


def _eval_every_window(args, model, frame_shape, sources, split) -> int:
    """``opzoo eval --windows all``: one-step scores over every window, pooled over the files in order."""
    from .evaluate import evaluate_windows
    from .logger import strict_json

    cfg = model.pretrained_cfg or {}
    batch = args.batch_size or cfg.get("test_batch_size") or 8
    fields = _vrmse_fields(model, sources[0])
    if fields is None or any(_vrmse_fields(model, s) != fields for s in sources):
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
    from .run_dir import move_aside

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
    from .evaluate import evaluate_dataset, headline, metric_table, with_persistence, write_results
    from .plots import plot_error_curves, plot_rollout_panels, rollout_title

    _claim_out_dir(Path(args.out), args.model, args.new)
    model = _load_model(args.model, args.pretrained)
    model, frame_shape, sources = _frame_shape_for(model, args.data, args.resolution, args.layout, _fields(args))
    _check_channel(args.channel, sources)
    split = [_split_of(model, src, args.split, args.test_fraction, args.include_training) for src in sources]
    for path, (_, which) in zip(args.data, split):
        print(f"scoring {Path(path).name}: {which}")
    sources = [src for src, _ in split]
    if args.windows == "all":
        if args.skip_bad_trajectories:
            raise OpzooError("--skip-bad-trajectories does not apply with --windows all: The Well's test score takes "
                             "every window of every trajectory (it skips none); repair the file, or score whole "
                             "rollouts with --windows first --skip-bad-trajectories")
        _bad_trajectories(sources, frame_shape, None, None, False, every_window=True)
        return _eval_every_window(args, model, frame_shape, sources, split)
    args.batch_size = args.batch_size or 8
    bad = _bad_trajectories(sources, frame_shape, args.horizon, args.max_trajectories, args.skip_bad_trajectories)
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
                                            vrmse_fields=_vrmse_fields(model, src))
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


def cmd_rollout(args) -> int:
    import torch

    from .losses import l2_full, l2_per_step
    from .plots import plot_rollout_panels

    if args.steps is not None and args.steps < 1:
        raise OpzooError(f"--steps must be >= 1, got {args.steps}")
    model = _load_model(args.model, args.pretrained)
    model, frame_shape, (src,) = _frame_shape_for(model, [args.data], args.resolution, args.layout, _fields(args))
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
    from .seen_data import trained_by

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


LAYOUT_HELP = ("the data files' layout when detection cannot tell (see `opzoo data inspect`): canonical, "
               "pdebench-groups, pdebench-cfd, pdebench-tensor, fno-mat, the-well, array (.npy/.npz/.pt as "
               "[N, *S, T, C]) or array:<axes>, e.g. array:NTXYC (default: detected)")
NEW_HELP = ("start a new run even if the directory holds one: its contents are first moved to "
            "<dir>.replaced-<time> (nothing is deleted); without it, a run resumes only under the config it "
            "was started with")


def add_training_commands(subparsers) -> None:
    """Add ``pretrain``, ``finetune``, ``eval`` and ``rollout`` to an argparse sub-parser group."""
    p = subparsers.add_parser("pretrain", help="train a model from a run config (YAML or JSON)")
    p.add_argument("config", help="run config, e.g. configs/micro-pot.yaml")
    p.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE",
                   help="override config values, e.g. training.steps=100")
    p.add_argument("--output-dir", help="override output_dir")
    p.add_argument("--new", action="store_true", help=NEW_HELP)
    p.set_defaults(func=_one_line_errors(cmd_pretrain))

    p = subparsers.add_parser(
        "finetune", help="fine-tune a pretrained model on your data (HDF5 in any layout opzoo reads, or .npy/.npz/.pt "
                         "arrays; more channels, another resolution or T_in adapt its input/output layers); reports "
                         "zero-shot and fine-tuned errors")
    p.add_argument("model", help="preset or alias (with --no-pretrained for random init), hf-hub:org/repo[@rev], local-dir:PATH or a saved repo dir")
    p.add_argument("--data", nargs="+", required=True, help="your data file(s): HDF5 in any layout opzoo reads, or "
                                                               ".npy/.npz/.pt arrays with --layout array:<axes>")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--steps", type=int, default=500, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=8, help="trajectory windows per step")
    p.add_argument("--lr", type=float, help="max learning rate of the one-cycle schedule (default: the model's "
                                            "recommended finetune_lr in its pretrained_cfg; 1e-3 from random init)")
    p.add_argument("--resolution", type=int, nargs="+",
                   help="train at this resolution, adapting the model's positional embedding (default: the model's)")
    p.add_argument("--in-timesteps", type=int, help="input window T_in, adapting the model's time aggregation")
    p.add_argument("--test-fraction", type=float, default=0.1, help="the last fraction of each file's trajectories "
                                                                   "held out for testing")
    p.add_argument("--layout", help=LAYOUT_HELP)
    p.add_argument("--fields", help=FIELDS_HELP)
    p.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=None,
                   help="start from the preset's published weights; --no-pretrained: random init "
                        "(default: published weights when the preset has some)")
    p.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--new", action="store_true", help=NEW_HELP)
    p.set_defaults(func=_one_line_errors(cmd_finetune))

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
            p.set_defaults(func=_one_line_errors(cmd_eval))
        else:
            p.add_argument("--data", required=True)
            p.add_argument("--index", type=int, default=0, help="trajectory index")
            p.add_argument("--steps", type=int, help="rollout steps (default: to the end of the trajectory)")
            p.add_argument("--plot", help="PNG path for the panels")
            p.add_argument("--save", help="write the prediction to a safetensors file")
            p.set_defaults(func=_one_line_errors(cmd_rollout))


def main(argv: Sequence[str] | None = None) -> int:
    return command_group_main(add_training_commands, "python -m opzoo.training.cli", argv)


if __name__ == "__main__":
    sys.exit(main())

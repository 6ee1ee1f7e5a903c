"""What ``opzoo eval`` and ``opzoo rollout`` do, as library functions: a loaded model scored on data files at the
files' own grids, its results and plots written (:func:`evaluate_files`, :func:`evaluate_every_window`), one
trajectory rolled out, scored, plotted and saved (:func:`rollout_trajectory`). The commands
(:mod:`opzoo.cli.evaluation`) only parse their arguments and call these."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import OpzooError

if TYPE_CHECKING:
    from torch import nn


def _check_channel(channel: int, sources) -> None:
    """``--channel`` names a field of every file, in the file's own order (checked before any work: a bad one used to
    fail after scoring)."""
    for src in sources:
        names = [f for f, _ in src.source.file_channels()[0]]
        if not 0 <= channel < len(names):
            raise OpzooError(f"--channel {channel}: {src.path} has {len(names)} field(s) the model predicts "
                             f"({', '.join(f'{i} {n}' for i, n in enumerate(names))})")


def in_file_frame(src, *frames):
    """``frames`` (``[*S, t, C]`` as the model reads ``src``) in the file's own orientation and field order, and the
    file's fields they hold (:meth:`opzoo.data.TrajectorySource.to_file_frame`): what a user's plot and saved
    prediction show, whatever the fit did on the way in (a transposed grid, fields read under other names)."""
    out = [src.source.to_file_frame(f) for f in frames]
    return [f for f, _, _ in out], out[0][1], out[0][2]


def _plot_path(plot: str, data: str, index: int) -> Path:
    """``--plot``: a PNG path, or an existing directory (or one ending in /) to write ``<file>-<index>.png`` into."""
    path = Path(plot)
    if path.is_dir() or plot.endswith(("/", "\\")):
        path.mkdir(parents=True, exist_ok=True)
        return path / f"{Path(data).stem}-{index}.png"
    return path


def model_identity(name: str) -> str:
    """How eval results name the model they score: a directory by its resolved path, anything else as given."""
    from ..model_io.reference import parse_model_reference

    try:
        ref = parse_model_reference(name, backbones=False)
    except OpzooError:
        return str(name)
    return str(ref.path.resolve()) if ref.kind == "dir" else str(name)


def evaluate_files(model: "nn.Module", model_name: str, data: Sequence[str], out: str | os.PathLike, *,
                   resolution: Sequence[int] | None = None, layout: str | None = None,
                   fields: Sequence[str] | None = None, windows: str = "first", horizon: int | None = None,
                   batch_size: int | None = None, split: str | None = None, test_fraction: float | None = None,
                   include_training: bool = False, max_trajectories: int | None = None,
                   skip_bad_trajectories: bool = False, channel: int = 0, plot_steps: Sequence[int] = (1, 5, 10),
                   say: Callable[[str], None] = print, field_map=None, training_set: str | None = None,
                   keep_boundary: bool = False) -> int:
    """What ``opzoo eval`` does with a loaded ``model`` (named ``model_name`` in the results): fit ``data`` to it
    (:func:`fit_files`), score each file's held-out trajectories at the file's own grid (or, ``windows="all"``, one
    step from every window, pooled), beside persistence, and write the results (JSON, CSV) and PNG plots into ``out``;
    every line it reports goes to ``say``. Returns the exit code (0)."""
    from .bad_data import bad_trajectories_of
    from .fit import fit_files_block
    from .plots import plot_error_curves, plot_rollout_panels, rollout_title
    from .rollouts import evaluate_dataset, headline, metric_table, with_persistence, write_results
    from .splits import split_to_score
    from .vrmse import vrmse_fields

    data = list(data)
    fitted = fit_files_block(model, data, resolution, layout, fields, say=say, field_map=field_map,
                             training_set=training_set, test_fraction=test_fraction, name=model_name,
                             keep_boundary=keep_boundary)
    model, frame_shape, sources = fitted.model, fitted.frame_shape, fitted.sources
    _check_channel(channel, sources)
    split_name = split
    split = [split_to_score(model, src, split_name, test_fraction, include_training) for src in sources]
    for path, (_, which) in zip(data, split):
        say(f"scoring {Path(path).name}: {which}")
    sources = [src for src, _ in split]
    if windows == "all":
        if skip_bad_trajectories:
            raise OpzooError("--skip-bad-trajectories does not apply with --windows all: The Well's test score takes "
                             "every window of every trajectory (it skips none); repair the file, or score whole "
                             "rollouts with --windows first --skip-bad-trajectories")
        bad_trajectories_of(sources, frame_shape, None, None, False, every_window=True)
        return evaluate_every_window(model, model_name, data, out, frame_shape, sources, [w for _, w in split],
                                     batch_size, say)
    batch_size = batch_size or 8
    bad = bad_trajectories_of(sources, frame_shape, horizon, max_trajectories, skip_bad_trajectories)
    out = Path(out)
    results = []
    for path, src, (_, which), skipped in zip(data, sources, split, bad):
        name = Path(path).stem
        if skipped:
            say(f"{name}: skipped {len(skipped)} trajectory(ies) with NaN/Inf values: "
                  + ", ".join(f"{b.index} ({b.count} values)" for b in skipped))
        r, (truth, pred) = evaluate_dataset(model, name, src, frame_shape, horizon, batch_size=batch_size,
                                            max_trajectories=max_trajectories, keep_first=True,
                                            exclude=[b.position for b in skipped],
                                            vrmse_fields=vrmse_fields(model, src))
        with_persistence(r, src, frame_shape, horizon, batch_size=batch_size, max_trajectories=max_trajectories,
                         exclude=[b.position for b in skipped])
        results.append(r)
        for fname, v in r.vrmse.items():
            say(f"{name}: VRMSE {fname}: " + ", ".join(f"{k} {x:.4g}" for k, x in v.items()))
        shown = next(i for i in range(len(src)) if i not in {b.position for b in skipped})  # its position in src
        (truth, pred), names, _ = in_file_frame(src, truth, pred)
        plot_rollout_panels(truth, pred, plot_steps, out / f"{name}-panels.png", channel=channel,
                            title=rollout_title(model_name, src, shown, channel, names))
        say(f"{name}: l2 full {r.l2_full:.4g} (persistence {r.persistence.l2_full:.4g}) over {r.n_trajectories} "
              f"trajectories ({which}{'' if max_trajectories is None else f', first {r.n_trajectories}'}), "
              f"horizon {r.horizon}")
        for h, v in sorted(r.short_horizons.items()):
            say(f"{name}: l2 at horizon {h}: {v:.4g} (persistence {r.persistence.short_horizons.get(h, float('nan')):.4g})")
        what, _, _, note = headline(r)
        if note:
            say(f"{name}: headline {what}: {note}")
        for line in metric_table(r):
            say(line)
    paths = write_results(results, out, stem="eval", model=model_identity(model_name), fit=fitted.lines)
    plot_error_curves({r.name: r.per_step for r in results}, out / "error-vs-step.png",
                      persistence={r.name: r.persistence.per_step for r in results},
                      title=f"{model_name}: rollout error per step ({split_name or 'held-out or all'})")
    if any(r.expert_load for r in results):  # a model with routers: which PDE goes to which expert
        from .plots import plot_expert_load

        plot_expert_load({r.name: r.expert_load for r in results}, out / "expert-load.png")
    say(f"wrote {paths['json']}, {paths['csv']}, {paths['per_step_csv']} and PNG plots in {out}")
    return 0


def evaluate_every_window(model: "nn.Module", model_name: str, data: Sequence[str], out: str | os.PathLike,
                          frame_shape, sources, splits: Sequence[str], batch_size: int | None = None,
                          say: Callable[[str], None] = print) -> int:
    """``opzoo eval --windows all``: one-step scores over every window of ``sources`` (``data`` fitted to ``model``,
    ``splits`` naming which trajectories of each), pooled over the files in order, written to ``out``."""
    from ..files import atomic_write, strict_json
    from .rollouts import evaluate_windows
    from .vrmse import vrmse_fields

    cfg = model.pretrained_cfg or {}
    batch = batch_size or cfg.get("test_batch_size") or 8
    fields = vrmse_fields(model, sources[0])
    if fields is None or any(vrmse_fields(model, s) != fields for s in sources):
        raise OpzooError("--windows all pools the files, so they must hold the same named channels")
    where = "; ".join(splits)
    r = evaluate_windows(model, sources, frame_shape, batch, fields, name=", ".join(Path(p).name for p in data))
    protocol = cfg.get("test_protocol")
    from_cfg = batch_size is None and cfg.get("test_batch_size")
    resampled = [s.path for s in sources if tuple(s.spatial) != tuple(frame_shape.resolution)]
    say(f"protocol: every window (T_in={frame_shape.in_timesteps} -> 1, stride 1) of {where}, {r.n_windows} windows in "
          f"file order, one-step scores as the mean of batch means (batch size {batch}"
          f"{', the model pretrained_cfg.test_batch_size' if from_cfg else ''}; the short last batch of "
          f"{r.dropped} window(s) left out, as The Well's DataLoader does with drop_last=True)")
    if protocol and not resampled:
        say(f"  this is {protocol}, when the files are that test split, in that order"
              + ("" if from_cfg else f"; note: its batch size is {cfg.get('test_batch_size')}, not {batch}"
                 if cfg.get("test_batch_size") else ""))
    elif protocol:
        say(f"  not {protocol}: the files were resampled to {'x'.join(map(str, frame_shape.resolution))} "
              f"({', '.join(map(str, resampled))}); compare it only with scores made the same way")
    else:
        say("  not an upstream's published protocol for this model: compare it only with scores made the same way")
    for name, v in r.vrmse.items():
        say(f"VRMSE {name}: {v:.4g} (persistence {r.persistence_vrmse[name]:.4g})")
    say(f"l2 one step: {r.l2:.4g} (persistence {r.persistence_l2:.4g})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"model": model_identity(model_name), "protocol": "every window, one step, mean of batch means, the short "
           "last batch dropped", "upstream_protocol": None if resampled else protocol,
           "grid": list(frame_shape.resolution), "resampled_files": resampled,
           "files": list(data), "split": where, "n_windows": r.n_windows, "dropped_windows": r.dropped,
           "batch_size": r.batch_size,
           "vrmse": r.vrmse, "l2": r.l2, "persistence": {"vrmse": r.persistence_vrmse, "l2": r.persistence_l2}}
    atomic_write(out / "eval_windows.json", json.dumps(strict_json(doc), indent=2, allow_nan=False))
    say(f"wrote {out / 'eval_windows.json'}")
    return 0


def rollout_trajectory(model: "nn.Module", model_name: str, data: str, *, index: int = 0, steps: int | None = None,
                       resolution: Sequence[int] | None = None, layout: str | None = None,
                       fields: Sequence[str] | None = None, plot: str | None = None, save: str | None = None,
                       channel: int = 0, plot_steps: Sequence[int] = (1, 5, 10),
                       say: Callable[[str], None] = print, field_map=None, training_set: str | None = None,
                       keep_boundary: bool = False) -> int:
    """What ``opzoo rollout`` does with a loaded ``model``: roll out trajectory ``index`` of ``data`` (``steps``,
    default to its end) at the model's grid and score it back at the file's own grid; ``plot`` the panels, ``save``
    the prediction (safetensors, with its grid and provenance as metadata). Returns the exit code (0)."""
    import torch

    from .fit import fit_files
    from .l2 import l2_full, l2_per_step
    from .plots import plot_rollout_panels

    if steps is not None and steps < 1:
        raise OpzooError(f"--steps must be >= 1, got {steps}")
    model, frame_shape, (src,) = fit_files(model, [data], resolution, layout, fields, say=say, field_map=field_map,
                                           training_set=training_set, name=model_name, keep_boundary=keep_boundary)
    _check_channel(channel, [src])
    t_in = frame_shape.in_timesteps
    if not 0 <= index < len(src):
        raise OpzooError(f"{data}: --index {index} out of range; the file has {len(src)} trajectories")
    from .shape_check import check_frames

    check_frames(src, t_in, frame_shape.out_timesteps, None, "--steps")
    from .bad_data import non_finite_in

    count, first = non_finite_in(src.read(index).numpy())
    if count:
        from ..data.errors import NonFiniteDataError

        raise NonFiniteDataError(f"non-finite data: {data}: trajectory {index} holds {count} NaN/Inf "
                                 f"value(s) (first in frame {first}); choose another --index (`opzoo data inspect "
                                 f"{data}` lists the trajectories with NaN/Inf)")
    steps = steps or src.n_steps - t_in
    avail = min(steps, src.n_steps - t_in)
    from ..data.transforms import resize_batch

    frames, mask = src.frames(index, frame_shape.at(src.spatial), 0, t_in + avail)  # the file's own grid
    with torch.no_grad():
        x = resize_batch(frames[None, ..., :t_in, :], frame_shape.resolution, frame_shape.resample)
        pred = model.rollout(x, steps, **({} if bool(mask.all()) else {"channel_mask": mask}))
        pred = resize_batch(pred, src.spatial, frame_shape.resample)[0]  # back to the file's grid, scored and saved
    from .splits import trained_by

    who = trained_by(model, src, index)
    say(f"rolled out {steps} steps from trajectory {index} of {data}"
          + (f": SEEN IN TRAINING (by {who}), so its error is no held-out score" if who else ""))
    if avail >= 1:
        truth = frames[..., t_in:, :]
        p = pred[..., :avail, :]
        full = float(l2_full(p[None], truth[None], mask)[0])
        curve = l2_per_step(p[None], truth[None], mask)[0]
        say(f"  l2 full over the {avail} steps with ground truth: {full:.4g}; last step: {float(curve[-1]):.4g}")
        if plot:
            from .plots import rollout_title

            plot = _plot_path(plot, data, index)
            (truth_f, p_f), names, _ = in_file_frame(src, truth, p)
            plot_rollout_panels(truth_f, p_f, plot_steps, plot, channel=channel,
                                title=rollout_title(model_name, src, index, channel, names))
            say(f"  plot: {plot}")
    if save:
        save_prediction(save, pred, src, data, index, model_name, frame_shape, who, say)
    return 0


def save_prediction(save: str, pred, src, data: str, index: int, model_name: str, frame_shape, who, say) -> None:
    """``rollout --save``: the prediction in the file's own orientation, grid and field order (safetensors, with its
    provenance as metadata); the model's channels that are no field of the file are named, not saved."""
    from safetensors.torch import save_file

    from ..files import atomic_writer
    from ..registry.contract import PAD

    if not str(save).lower().endswith(".safetensors"):
        raise OpzooError(f"--save {save}: the prediction is written as safetensors; name the file .safetensors")
    (pred_f,), names, left = in_file_frame(src, pred)
    spatial = src.source.file_spatial
    grid, ran = "x".join(map(str, spatial)), "x".join(map(str, frame_shape.resolution))
    left = [n for n in left if n != PAD]
    metadata = {"file": str(Path(data).name), "trajectory": str(index), "grid": grid,
                "model_grid": ran, "model": str(model_name), "channels": ",".join(names),
                "model_channels_not_saved": ",".join(left), "seen_in_training": who or "no",
                "read_transposed": "yes" if src.source.transposed else "no",
                "axes": "[" + ", ".join([*"XYZ"[:len(spatial)], "T", "C"]) + "]"}
    import tempfile

    with tempfile.TemporaryDirectory(dir=str(Path(save).parent or ".")) as tmp:  # safetensors writes by path
        staged = Path(tmp) / "prediction.safetensors"
        save_file({"prediction": pred_f.contiguous()}, str(staged), metadata=metadata)
        with atomic_writer(save, binary=True) as f:
            f.write(staged.read_bytes())
    ran_on = (f" (the model ran on it transposed, at {ran})" if src.source.transposed else
              "" if grid == ran else f" (the model ran at {ran})")
    say(f"  prediction [*S, steps, C] in the file's orientation and field order ({', '.join(names)}) at its grid "
        f"{grid}{ran_on} saved to {save}"
        + (f"; not saved, no field of the file: {', '.join(left)}" if left else ""))


__all__ = ["evaluate_files", "evaluate_every_window", "rollout_trajectory", "model_identity"]

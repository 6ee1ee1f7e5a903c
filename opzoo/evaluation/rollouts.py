"""Rollout evaluation: "l2 full" and the per-step error curve per dataset, CSV/JSON and PNG plots."""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from .._deprecation import renamed_arguments
from ..data import FrameShape, TrajectoryDataset
from ..data.transforms import resize_batch
from ..files import atomic_write, atomic_writer, read_json, strict_json
from .l2 import l2_full, l2_per_step
from .vrmse import vrmse, vrmse_summary


@dataclass
class DatasetResult:
    name: str
    l2_full: float  # mean over trajectories
    per_step: list[float]  # mean relative L2 at each rollout step
    n_trajectories: int
    horizon: int
    l2_full_per_trajectory: list[float] = field(default_factory=list)
    expert_load: dict[str, list[float]] = field(default_factory=dict)  # router name -> share per expert (models with routers)
    skipped: list[int] = field(default_factory=list)  # trajectories (indices in the file) left out: NaN/Inf
    vrmse: dict[str, dict[str, float]] = field(default_factory=dict)  # field -> one_step/all/windows (The Well's metric)
    persistence: "DatasetResult | None" = None  # the same trajectories scored by the persistence baseline
    short_horizons: dict[int, float] = field(default_factory=dict)  # h -> l2 full of the first h steps
    grid: list[int] = field(default_factory=list)  # the grid the scores were computed at: the file's own
    model_grid: list[int] = field(default_factory=list)  # the grid the model ran at (inputs resampled to it)
    metrics: dict[str, float] = field(default_factory=dict)  # PDEBench's set (opzoo.evaluation.pdebench_metrics)
    intervals: dict[str, list[float]] = field(default_factory=dict)  # metric -> 95 % bootstrap interval over trajectories
    paired: dict[str, list[float]] = field(default_factory=dict)  # metric -> [model - persistence, its interval]
    per_trajectory: object = field(default=None, repr=False, compare=False)  # TrajectoryMetrics, for paired comparisons


SHORT_HORIZONS = (1, 5)  # rollout lengths reported next to the full rollout
SATURATED = 0.8  # a relative L2 this high for both the model and persistence: the rollout has decorrelated


def headline(r: DatasetResult) -> tuple[str, float, float | None, str]:
    """``(what, model, persistence, note)``: the number a summary should lead with, and why when it is not the full
    rollout.

    - The full rollout, unless it saturates: model and persistence both at least ``SATURATED``. A field that has
      changed that much since the last input frame (a chaotic flow decorrelating, but as well a wave or an advected
      field moved out of phase) leaves the full-rollout error little to say; then the longest short horizon at which
      persistence is not saturated leads, with a note saying so.
    - A model worse than persistence at every horizon is not predicting the data at all: the full rollout leads, and
      the note says that, not that the data are unpredictable.
    """
    base = r.persistence
    full = (f"full rollout ({r.horizon} steps)", r.l2_full, base.l2_full if base else None, "")
    if base is None:
        return full
    pairs = [(r.l2_full, base.l2_full)] + [(v, base.short_horizons[h]) for h, v in r.short_horizons.items()
                                            if h in base.short_horizons]
    if all(model > p for model, p in pairs):
        return (*full[:3], f"the model is worse than persistence at every horizon reported (full rollout "
                           f"{r.l2_full:.3g} against {base.l2_full:.3g}): it does not predict these data")
    if r.l2_full < SATURATED or base.l2_full < SATURATED:
        return full
    for h in sorted(r.short_horizons, reverse=True):
        if h < r.horizon and base.short_horizons.get(h, 1.0) < SATURATED:
            mine, theirs = r.short_horizons[h], base.short_horizons.get(h, float("nan"))
            worse = (f", where the model is worse than persistence ({mine:.3g} against {theirs:.3g}): it does not "
                     f"beat repeating the last frame" if mine > theirs else "")
            note = (f"the full-rollout error is saturated (model {r.l2_full:.3g}, persistence {base.l2_full:.3g}, "
                    f"both >= {SATURATED}: the field has changed as much as it can since the last input frame) and "
                    f"says little; horizon {h} is the headline{worse}")
            return f"horizon {h}", r.short_horizons[h], base.short_horizons.get(h), note
    return (*full[:3], f"every horizon is saturated (model and persistence >= {SATURATED}): the data change "
                       f"beyond recognition within the shortest horizon reported")


def metric_table(r: DatasetResult) -> list[str]:
    """PDEBench's metrics of ``r`` (and of its persistence baseline, and the paired difference), with their 95 %
    bootstrap intervals over trajectories, as the lines ``opzoo eval`` prints."""
    if not r.metrics:
        return []

    def cell(value: float, interval) -> str:
        if math.isnan(value):  # nothing to score at this grid (a wavenumber band beyond it): said below the table
            return "n/a"
        return f"{value:.4g}" + (f" [{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "")

    base = r.persistence
    grid = "x".join(map(str, r.grid)) if r.grid else "?"
    from .pdebench_metrics import plugin_metric_names, why_undefined

    added = plugin_metric_names(r.metrics)
    which = "PDEBench's metrics" + (f" and the plugins' ({', '.join(added)})" if added else "")
    lines = [f"{r.name}: {which} at the file's grid {grid}, over {r.n_trajectories} trajectories"
             + (" (95 % bootstrap intervals over trajectories)" if r.intervals else "") + ":",
             f"  {'metric':<12}{'model':<32}{'persistence':<32}{'model - persistence (paired)' if r.paired else ''}"]
    for k, v in r.metrics.items():
        row = f"  {k:<12}{cell(v, r.intervals.get(k)):<31} "
        if base is not None and base.metrics:
            row += f"{cell(base.metrics.get(k, math.nan), base.intervals.get(k)):<31} "
        if k in r.paired:
            d, lo, hi = r.paired[k]
            row += "n/a" if math.isnan(d) else f"{d:+.4g} [{lo:+.3g}, {hi:+.3g}]" + (" *" if lo > 0 or hi < 0 else "")
        lines.append(row.rstrip())
    if r.paired:
        lines.append("  (* the interval of the difference excludes 0)")
    undefined = [why_undefined(k, r.grid) for k, v in r.metrics.items() if math.isnan(v)]
    if undefined:
        lines.append(f"  (n/a: {'; '.join(undefined)})")
    return lines


class Persistence(nn.Module):
    """The persistence baseline: every future frame is the last input frame.

    ``rollout(x [B, *S, T_in, C], steps) -> [B, *S, steps, C]``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., -1:, :]

    def rollout(self, x: torch.Tensor, steps: int, channel_mask: torch.Tensor | None = None) -> torch.Tensor:
        last = x[..., -1:, :]
        return last.expand(*last.shape[:-2], steps, last.shape[-1]).clone()


def persistence_result(name: str, source: TrajectoryDataset, frame_shape: FrameShape, horizon: int | None = None,
                       batch_size: int = 8, device="cpu", max_trajectories: int | None = None,
                       exclude: Sequence[int] = ()) -> DatasetResult:
    """The persistence baseline on ``source``: the last input frame repeated, at the file's own grid (never resampled
    through a model's grid). The one function every command's persistence comes from (``eval``, ``finetune``'s
    evaluations, ``validate``, ``rollout``)."""
    return evaluate_dataset(Persistence(), name, source, frame_shape.at(source.spatial), horizon, batch_size, device,
                            max_trajectories, exclude=exclude)


def with_persistence(result: DatasetResult, source: TrajectoryDataset, frame_shape: FrameShape, horizon: int | None = None,
                     batch_size: int = 8, device="cpu", max_trajectories: int | None = None,
                     exclude: Sequence[int] = ()) -> DatasetResult:
    """``result`` with ``persistence`` set (:func:`persistence_result`: the same trajectories and horizon) and the
    paired differences from it."""
    result.persistence = persistence_result(result.name, source, frame_shape, horizon, batch_size, device,
                                            max_trajectories, exclude)
    mine, theirs = result.per_trajectory, result.persistence.per_trajectory
    if mine is not None and theirs is not None and len(mine) == len(theirs) and len(mine) > 1:
        from .pdebench_metrics import bootstrap

        diffs = bootstrap(mine, theirs)
        result.paired = {k: [result.metrics[k] - result.persistence.metrics[k], *diffs[k]] for k in diffs}
    return result


@torch.no_grad()
def rollout_trajectories(model: nn.Module, source: TrajectoryDataset, frame_shape: FrameShape, horizon: int | None,
                         batch_size: int = 8, device: torch.device | str = "cpu", max_trajectories: int | None = None,
                         autocast: bool = False, exclude: Sequence[int] = (), first: int = 0):
    """Roll out from the first ``T_in`` frames of each trajectory (but the positions in ``exclude``); ``first``: from
    the ``T_in`` frames starting at that frame instead (models of different windows then predict the same frames).

    Yields ``(truth [B, *S, H, C], pred [B, *S, H, C], mask [C])`` batches at the file's own grid ``S``, where ``H``
    is ``horizon`` (default: every remaining frame of the trajectory). A model that runs at another grid
    (``frame_shape.resolution``) gets its input resampled to it, and its prediction is resampled back: scores are
    made on the file's grid, as PDEBench and The Well make them, never on a resized truth.
    """
    from ..errors import ConfigError

    t_in = frame_shape.in_timesteps
    left = source.n_steps - first - t_in
    h = left if horizon is None else min(horizon, left)
    if h < 1:
        raise ConfigError(f"{source.path}: trajectories of {source.n_steps} frames leave nothing to roll out after "
                          f"T_in={t_in}" + (f" from frame {first}" if first else "")
                          + f" (need at least {first + t_in + 1} frames)")
    n = len(source) if max_trajectories is None else min(len(source), max_trajectories)
    at_file = frame_shape.at(source.spatial)
    skip = set(exclude)
    order = [i for i in range(n) if i not in skip]
    for start in tqdm(range(0, len(order), batch_size), desc=f"rollout {os.path.basename(source.path)}", unit="batch",
                      disable=None, leave=False):
        frames, mask = zip(*(source.frames(i, at_file, first, first + t_in + h) for i in order[start:start + batch_size]))
        frames, mask = torch.stack(frames).to(device), mask[0].to(device)
        padded = {} if bool(mask.all()) else {"channel_mask": mask}  # a model told which channels hold no data
        x = resize_batch(frames[..., :t_in, :], frame_shape.resolution, frame_shape.resample)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
            pred = model.rollout(x, h, **padded)
        if (id(model), source.path) not in said_nonfinite:
            say_nonfinite(model, source, x, pred, order[start:start + batch_size])
        yield frames[..., t_in:, :].float(), resize_batch(pred.float(), source.spatial, frame_shape.resample), mask


def say_nonfinite(model: nn.Module, source: TrajectoryDataset, x: torch.Tensor, pred: torch.Tensor,
                  trajectories: Sequence[int]) -> None:
    """Warn (once per file) where a rollout from finite inputs ``x`` predicted a non-finite value: the scores over that
    step are NaN, and a bare NaN says nothing of why."""
    bad = ~torch.isfinite(pred)
    if not bool(bad.any()) or not bool(torch.isfinite(x).all()):
        return  # all finite, or non-finite inputs (refused or said where the data is read)
    said_nonfinite.add((id(model), source.path))
    per_step = bad.movedim(-2, 1).reshape(bad.shape[0], bad.shape[-2], -1).any(-1)  # [B, H]
    step = int(per_step.any(0).nonzero()[0])
    which = [trajectories[b] for b in per_step[:, step].nonzero()[:, 0].tolist()]
    name = getattr(model, "preset_name", None) or type(model).__name__
    warnings.warn(f"{source.path}: {name}'s rollout became non-finite at step {step + 1} (trajectory "
                  f"{', '.join(map(str, which[:5]))}{', ...' if len(which) > 5 else ''}) from finite inputs: every score "
                  f"over that step is NaN. Its values outgrew {str(pred.dtype).replace('torch.', '')} or it divided by "
                  f"zero (docs/data-contract.md: where the family's normalization breaks); the same model in float64 "
                  f"(model.double()) shows whether more range keeps it finite", NonFiniteRollout, stacklevel=2)


class NonFiniteRollout(UserWarning):
    """A model's rollout turned non-finite from finite inputs (:func:`say_nonfinite`)."""


said_nonfinite: set[tuple[int, str]] = set()  # (model, file) pairs already said


@renamed_arguments({"adapt": "frame_shape"})
def evaluate_dataset(model: nn.Module, name: str, source: TrajectoryDataset, frame_shape: FrameShape, horizon: int | None = None,
                     batch_size: int = 8, device="cpu", max_trajectories: int | None = None, autocast: bool = False,
                     keep_first: bool = False, exclude: Sequence[int] = (), vrmse_fields: dict[str, int] | None = None):
    """``DatasetResult`` of one dataset; with ``keep_first`` also ``(truth, pred)`` of its first trajectory.

    ``exclude``: positions in ``source`` left out (see :func:`opzoo.evaluation.bad_data.scan_trajectories`);
    recorded by their index in the file in ``DatasetResult.skipped``. ``vrmse_fields`` (name -> channel)
    adds The Well's VRMSE of those channels (default: every valid one).
    """
    from ..contracts.routing import ExpertLoadRecorder
    from .pdebench_metrics import TrajectoryMetrics, bootstrap

    was_training = model.training
    model.eval()
    fulls, curves, vrmses, first = [], [], [], None
    per_trajectory = TrajectoryMetrics()
    shorts: dict[int, list] = {}
    try:
        with ExpertLoadRecorder(model) as recorder:  # which experts this dataset's inputs go to
            for truth, pred, mask in rollout_trajectories(model, source, frame_shape, horizon, batch_size, device,
                                                          max_trajectories, autocast, exclude):
                fulls.append(l2_full(pred, truth, mask).cpu())
                for h in SHORT_HORIZONS:
                    if h < pred.shape[-2]:
                        shorts.setdefault(h, []).append(l2_full(pred[..., :h, :], truth[..., :h, :], mask).cpu())
                curves.append(l2_per_step(pred, truth, mask).cpu())
                vrmses.append(vrmse(pred, truth).cpu())
                per_trajectory.add(pred[..., mask].cpu(), truth[..., mask].cpu())  # the data's own channels
                if keep_first and first is None:
                    first = (truth[0].cpu(), pred[0].cpu())
    finally:
        model.train(was_training)
    full, curve = torch.cat(fulls), torch.cat(curves)
    if vrmse_fields is None:  # the file's channel names (the model's and the baseline's results name them alike)
        names = list(getattr(source, "channel_names", []))
        unique = len(set(names)) == len(names)
        vrmse_fields = {(names[c] if unique and c < len(names) else f"channel {c}"): c
                        for c in range(len(mask)) if mask[c]}
    per_step = torch.cat(vrmses).mean(0)[:, list(vrmse_fields.values())]  # [H, fields]
    result = DatasetResult(name, float(full.mean()), curve.mean(0).tolist(), len(full), curve.shape[1], full.tolist(),
                           recorder.loads(), [source.indices[i] for i in sorted(exclude)],
                           vrmse_summary(per_step, list(vrmse_fields)),
                           short_horizons={h: float(torch.cat(v).mean()) for h, v in shorts.items()},
                           grid=list(source.spatial), model_grid=list(frame_shape.resolution),
                           metrics=per_trajectory.values(), per_trajectory=per_trajectory)
    if len(per_trajectory) > 1:
        result.intervals = {k: list(v) for k, v in bootstrap(per_trajectory).items()}
    return (result, first) if keep_first else result


@dataclass
class WindowsResult:
    """One-step scores over every window of every trajectory of a list of files, pooled in file order."""

    name: str
    n_windows: int
    batch_size: int
    vrmse: dict[str, float]  # field (and "full", the mean over fields) -> mean over batches of batch means
    l2: float  # relative L2 of the one-step prediction, the same mean of batch means
    persistence_vrmse: dict[str, float]
    persistence_l2: float
    dropped: int = 0  # windows of the short last batch left out (drop_last)


@torch.no_grad()
def evaluate_windows(model: nn.Module, sources: Sequence[TrajectoryDataset], frame_shape: FrameShape, batch_size: int,
                     vrmse_fields: dict[str, int], name: str = "all files", device="cpu",
                     drop_last: bool = True) -> WindowsResult:
    """Every window (``T_in`` frames and the next one, stride 1) of every trajectory of ``sources``, in order,
    predicted one step ahead: VRMSE per field and relative L2 as the mean over consecutive batches of
    ``batch_size`` windows of each batch's mean. With a model's upstream test batch size and the upstream's test
    files this is The Well's test score (``Trainer.validation_loop`` with ``full=True``: its DataLoader runs over the
    concatenated files without shuffling, and drops the short last batch: ``WellDataModule.test_dataloader`` has
    ``drop_last=True`` at v1.0.1, v1.1.0, v1.2.0 and 215f55d, the_well/data/datamodule.py). ``drop_last=False``
    scores the short last batch too. Fewer windows than one batch score nothing: ConfigError."""
    from ..errors import ConfigError

    was_training = model.training
    model.eval()
    t_in, fields = frame_shape.in_timesteps, list(vrmse_fields.values())
    windows = [(src, i, t) for src in sources for i in range(len(src)) for t in range(src.n_steps - t_in)]
    dropped = len(windows) % batch_size if drop_last else 0
    if drop_last and windows and len(windows) < batch_size:
        raise ConfigError(f"{name}: {len(windows)} window(s), fewer than one batch of {batch_size}: The Well's test "
                          f"loop drops a short last batch (drop_last=True), so it scores nothing here; pass a "
                          f"--batch-size of at most {len(windows)} (then it is not The Well's protocol)")
    windows = windows[:len(windows) - dropped]
    sums = {"model": torch.zeros(len(fields) + 1, dtype=torch.float64),
            "persistence": torch.zeros(len(fields) + 1, dtype=torch.float64)}
    n_batches = 0
    try:
        for start in tqdm(range(0, len(windows), batch_size), desc=f"every window of {name}", unit="batch",
                          disable=None, leave=False):
            batch = windows[start:start + batch_size]
            frames, mask = zip(*(src.frames(i, frame_shape.at(src.spatial), t, t + t_in + 1) for src, i, t in batch))
            if len({f.shape for f in frames}) > 1:
                raise ConfigError(f"{name}: a batch holds windows of files at different grids; score them apart")
            frames = torch.stack(frames).to(device)  # at the files' own grid
            truth, x = frames[..., t_in:, :].float(), frames[..., :t_in, :]
            pred = resize_batch(model(resize_batch(x, frame_shape.resolution, frame_shape.resample)).float(),
                                frames.shape[1:-2], frame_shape.resample)
            for key, pred in (("model", pred), ("persistence", x[..., -1:, :].float())):
                per = vrmse(pred, truth)[:, 0, fields].double().mean(0)  # [fields]: this batch's mean
                sums[key][:-1] += per
                sums[key][-1] += l2_full(pred, truth, mask[0].to(device)).double().mean().cpu()
            n_batches += 1
    finally:
        model.train(was_training)
    if not n_batches:
        raise ConfigError(f"{name}: no window of T_in={t_in} frames and the next one in the trajectories")
    means = {k: (v / n_batches).tolist() for k, v in sums.items()}

    def per_field(values: list[float]) -> dict[str, float]:
        out = dict(zip(vrmse_fields, values[:-1]))
        out["full"] = sum(values[:-1]) / len(fields)
        return out

    return WindowsResult(name, len(windows) + dropped, batch_size, per_field(means["model"]), means["model"][-1],
                         per_field(means["persistence"]), means["persistence"][-1], dropped)


def _result_document(r: DatasetResult) -> dict:
    """One dataset's entry of ``eval.json`` (its persistence baseline nested in the same form)."""
    return {"l2_full": r.l2_full, "per_step": r.per_step, "n_trajectories": r.n_trajectories, "horizon": r.horizon,
            "l2_full_per_trajectory": r.l2_full_per_trajectory,
            **({"grid": r.grid, "model_grid": r.model_grid} if r.grid else {}),
            **({"pdebench_metrics": r.metrics} if r.metrics else {}),
            **({"bootstrap_95": r.intervals} if r.intervals else {}),
            **({"minus_persistence": r.paired} if r.paired else {}),
            **({"expert_load": r.expert_load} if r.expert_load else {}),
            **({"skipped_trajectories": r.skipped} if r.skipped else {}),
            **({"vrmse": r.vrmse} if r.vrmse else {}),
            **({"short_horizons": {str(h): v for h, v in r.short_horizons.items()}} if r.short_horizons else {}),
            **({"persistence": _result_document(r.persistence)} if r.persistence else {})}


def write_results(results: Sequence[DatasetResult], out_dir: str | os.PathLike, stem: str = "eval",
                  model: str | None = None, fit: Sequence[str] | None = None) -> dict[str, Path]:
    """``<stem>.json`` (everything, with the ``model`` scored and the ``fit`` block of the data to it),
    ``<stem>.csv`` (one row per dataset), ``<stem>_per_step.csv``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / f"{stem}.json", "csv": out / f"{stem}.csv", "per_step_csv": out / f"{stem}_per_step.csv"}
    summary = {**({"model": model} if model else {}), **({"fit": list(fit)} if fit else {}),
               "l2_full_mean": sum(r.l2_full for r in results) / len(results),
               "datasets": {r.name: _result_document(r) for r in results}}
    atomic_write(paths["json"], json.dumps(strict_json(summary), indent=2, allow_nan=False))
    with atomic_writer(paths["csv"]) as f:
        w = csv.writer(f)
        w.writerow(["dataset", "l2_full", "persistence_l2_full", "n_trajectories", "horizon",
                    *[f"l2_h{h}" for h in SHORT_HORIZONS], *[f"persistence_l2_h{h}" for h in SHORT_HORIZONS]])
        for r in results:
            base = f"{r.persistence.l2_full:.8g}" if r.persistence else ""
            shorts = [f"{r.short_horizons[h]:.8g}" if h in r.short_horizons else "" for h in SHORT_HORIZONS]
            pshorts = [f"{r.persistence.short_horizons[h]:.8g}" if r.persistence and h in r.persistence.short_horizons
                       else "" for h in SHORT_HORIZONS]
            w.writerow([r.name, f"{r.l2_full:.8g}", base, r.n_trajectories, r.horizon, *shorts, *pshorts])
    with atomic_writer(paths["per_step_csv"]) as f:
        w = csv.writer(f)
        w.writerow(["dataset", "step", "l2", "persistence_l2"])
        for r in results:
            base = r.persistence.per_step if r.persistence else [None] * len(r.per_step)
            for s, (v, b) in enumerate(zip(r.per_step, base), 1):
                w.writerow([r.name, s, f"{v:.8g}", "" if b is None else f"{b:.8g}"])
    return paths


def read_results(path: str | os.PathLike) -> list[DatasetResult]:
    """The results a :func:`write_results` JSON file holds, in its order (``null`` reads back as NaN)."""
    from ..errors import OpzooError

    def num(v) -> float:
        return float("nan") if v is None else float(v)

    def result(name: str, d: dict) -> DatasetResult:
        return DatasetResult(name, num(d["l2_full"]), [num(v) for v in d["per_step"]], d["n_trajectories"],
                             d["horizon"], [num(v) for v in d["l2_full_per_trajectory"]], d.get("expert_load", {}),
                             d.get("skipped_trajectories", []),
                             {f: {k: num(v) for k, v in per.items()} for f, per in d.get("vrmse", {}).items()},
                             result(name, d["persistence"]) if "persistence" in d else None,
                             {int(h): num(v) for h, v in d.get("short_horizons", {}).items()},
                             list(d.get("grid", [])), list(d.get("model_grid", [])),
                             {k: num(v) for k, v in d.get("pdebench_metrics", {}).items()},
                             {k: [num(x) for x in v] for k, v in d.get("bootstrap_95", {}).items()},
                             {k: [num(x) for x in v] for k, v in d.get("minus_persistence", {}).items()})

    path = Path(path)
    try:
        doc = read_json(path, "an evaluation result", error=OpzooError)
        return [result(name, d) for name, d in doc["datasets"].items()]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise OpzooError(f"{path}: not a readable evaluation result ({type(e).__name__}: {e})") from None

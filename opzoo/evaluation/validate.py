"""``opzoo validate`` (timm's ``validate.py``): many models scored on the same files, with the same split and
metrics, one CSV row per model and file; a model that cannot read a file is a row saying why, and the run
goes on."""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import OpzooError

COLUMNS = ("model", "file", "status", "split", "trajectories", "horizon", "grid", "l2_full", "persistence_l2_full",
           "l2_first1", "l2_first5", "l2_at_step1", "l2_at_step5", "vrmse_one_step", "nRMSE", "nRMSE_lo", "nRMSE_hi",
           "nRMSE_minus_first", "nRMSE_minus_first_lo", "nRMSE_minus_first_hi", "reason")


@dataclass
class ValidateRow:
    """One model on one file. ``l2_firstK``: relative L2 over the first K rollout steps (space and time together, as
    ``l2_full`` over the whole rollout); ``l2_at_stepK``: relative L2 of step K alone."""

    model: str
    file: str
    status: str  # "ok" or "failed"
    split: str = ""
    trajectories: int = 0
    horizon: int = 0
    grid: str = ""  # the grid the scores were computed at (the file's own)
    l2_full: float = math.nan
    persistence_l2_full: float = math.nan
    l2_first1: float = math.nan
    l2_first5: float = math.nan
    l2_at_step1: float = math.nan
    l2_at_step5: float = math.nan
    vrmse_one_step: float = math.nan  # mean over the fields of The Well's one-step VRMSE
    # PDEBench's nRMSE with its 95 % bootstrap interval over trajectories, and its paired difference from the first
    # model scored on the file (the same trajectories, resampled together)
    nRMSE: float = math.nan
    nRMSE_lo: float = math.nan
    nRMSE_hi: float = math.nan
    nRMSE_minus_first: float = math.nan
    nRMSE_minus_first_lo: float = math.nan
    nRMSE_minus_first_hi: float = math.nan
    reason: str = ""
    per_trajectory: object = dataclasses.field(default=None, repr=False, compare=False)
    # metrics registered by plugins (opzoo.Metric): name -> value, name_lo / name_hi -> its 95 % interval
    plugin_metrics: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


def models_matching(patterns: Sequence[str]) -> list[str]:
    """Presets with published weights matching the glob ``patterns`` (``*-micro``), and any other reference (a
    saved repo, ``hf-hub:...``) as given."""
    from ..model_io.builder import list_models

    names: list[str] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            found = list_models(pattern, pretrained=True)
            if not found:
                raise OpzooError(f"no preset with published weights matches {pattern!r} (`opzoo list --pretrained`)")
            names += found
        else:
            names.append(pattern)
    return list(dict.fromkeys(names))


def score(model, name: str, path: str, layout: str | None, horizon: int | None, indices: Sequence[int], split_label: str,
          batch_size: int, max_trajectories: int | None, field_map=None, training_set: str | None = None,
          say=print) -> ValidateRow:
    """One model on the trajectories ``indices`` of one file, as ``opzoo eval`` scores them (the same fit, l2, VRMSE,
    persistence, at the file's grid); non-finite data or predictions fail the row."""
    from .bad_data import scan_trajectories
    from .fit import fit_files
    from .rollouts import evaluate_dataset, with_persistence
    from .vrmse import vrmse_fields

    model, frame_shape, (src,) = fit_files(model, [path], None, layout, say=say, field_map=field_map,
                                           training_set=training_set, name=name)
    src = src.subset(indices)
    frames = src.n_steps if horizon is None else min(src.n_steps, frame_shape.in_timesteps + horizon)
    bad = scan_trajectories(src, max_trajectories, frames)
    if bad:  # a table row of NaN would pass for a score
        more = f" (and {len(bad) - 1} more trajectory(ies))" if len(bad) > 1 else ""
        raise OpzooError(f"non-finite data: {bad[0].describe()}{more}; repair the file, or score the others with "
                         f"opzoo eval --skip-bad-trajectories")
    r = evaluate_dataset(model, Path(path).stem, src, frame_shape, horizon, batch_size=batch_size,
                         max_trajectories=max_trajectories, vrmse_fields=vrmse_fields(model, src))
    if not math.isfinite(r.l2_full):
        raise OpzooError(f"{path}: the model's predictions are not finite (l2 full {r.l2_full}): it diverged on this "
                         f"file; nothing to score")
    with_persistence(r, src, frame_shape, horizon, batch_size=batch_size, max_trajectories=max_trajectories)
    one_step = [v["one_step"] for v in r.vrmse.values() if "one_step" in v]
    at = {k: r.per_step[k - 1] if len(r.per_step) >= k else math.nan for k in (1, 5)}
    lo, hi = r.intervals.get("nRMSE", (math.nan, math.nan))
    from .pdebench_metrics import plugin_metric_names

    extra = {}
    for metric in plugin_metric_names(r.metrics):
        extra[metric] = r.metrics[metric]
        extra[f"{metric}_lo"], extra[f"{metric}_hi"] = r.intervals.get(metric, (math.nan, math.nan))
    return ValidateRow(name, path, "ok", split_label, r.n_trajectories, r.horizon, "x".join(map(str, r.grid)),
                       r.l2_full, r.persistence.l2_full, r.short_horizons.get(1, at[1]),
                       r.short_horizons.get(5, math.nan), at[1], at[5],
                       sum(one_step) / len(one_step) if one_step else math.nan, r.metrics.get("nRMSE", math.nan), lo,
                       hi, per_trajectory=r.per_trajectory, plugin_metrics=extra)


def paired_with_first(rows: Sequence[ValidateRow]) -> None:
    """Each scored row's nRMSE minus the first scored row's on the same file, with a paired bootstrap interval."""
    from .pdebench_metrics import bootstrap

    first = next((r for r in rows if r.status == "ok" and r.per_trajectory is not None), None)
    for row in rows:
        if row is first or first is None or row.status != "ok" or len(row.per_trajectory) < 2:
            continue
        lo, hi = bootstrap(row.per_trajectory, first.per_trajectory)["nRMSE"]
        row.nRMSE_minus_first, row.nRMSE_minus_first_lo, row.nRMSE_minus_first_hi = row.nRMSE - first.nRMSE, lo, hi


def common_split(models: dict, path: str, layout: str | None, split: str | None,
                 test_fraction: float | None) -> tuple[list[int], str]:
    """The trajectories of ``path`` every model may be scored on: for each model, the part it may call held-out (its
    record's held-out split, nothing any ancestor trained on; :func:`opzoo.evaluation.splits.choose_split`), and the
    rows share their intersection, so that every row of the table scores the same trajectories (and persistence is the
    same number on every row)."""
    from .fit import open_trajectories
    from .splits import choose_split

    source = open_trajectories(path, layout)
    chosen, reasons = None, []
    for name, model in models.items():
        idx, _, _ = choose_split(model, source, split, test_fraction, False)
        if len(idx) != source.source.n_samples:
            reasons.append(name)
        chosen = idx if chosen is None else [i for i in chosen if i in set(idx)]
    n = source.source.n_samples
    if not chosen:
        raise OpzooError(f"{path}: no trajectory is held out from every model ({', '.join(models)}): each trained on a "
                         f"part of it; score the models on other data, or one by one with `opzoo eval`")
    span = (f"trajectory {chosen[0]}" if len(chosen) == 1 else f"trajectories {chosen[0]}-{chosen[-1]}"
            if chosen == list(range(chosen[0], chosen[-1] + 1)) else
            "trajectories " + ", ".join(map(str, chosen[:6])) + (", ..." if len(chosen) > 6 else ""))
    why = f", what none of them trained on ({', '.join(reasons)} trained on parts of it)" if reasons else ""
    return chosen, f"{span} of {n} for every model{why}"


def validate(patterns: Sequence[str], data: Sequence[str], out: Path, *, layout: str | None = None,
             horizon: int | None = None, split: str | None = None, test_fraction: float | None = None,
             batch_size: int = 8, max_trajectories: int | None = None, field_map=None,
             training_set: str | None = None) -> list[ValidateRow]:
    """Every model of ``patterns`` on every file of ``data``, all on the same trajectories of each file
    (:func:`common_split`); writes ``out`` (CSV) and returns the rows."""
    from ..model_io.loading import load
    from ..model_io.pretrained import resolve_weights

    rows: list[ValidateRow] = []
    models, names = {}, models_matching(patterns)
    for name in names:
        try:
            models[name] = load(name, pretrained=resolve_weights(name, None)[0]).eval()
        except (OpzooError, OSError, ValueError) as e:
            reason = f"load: {' '.join(str(e).split())}"
            rows += [ValidateRow(name, path, "failed", reason=reason) for path in data]
            print(f"{name}: cannot load: {reason}", flush=True)
    for path in data:
        try:
            indices, label = common_split(models, path, layout, split, test_fraction) if models else ([], "")
            print(f"{Path(path).name}: {label}", flush=True)
        except (OpzooError, OSError, ValueError) as e:
            indices, failure = None, " ".join(str(e).split())
            print(f"{Path(path).name}: FAILED: {failure}", flush=True)
        file_rows = []
        for name, model in models.items():
            if indices is None:
                rows.append(ValidateRow(name, path, "failed", reason=failure))
                continue
            try:
                row = score(model, name, path, layout, horizon, indices, label, batch_size, max_trajectories,
                            field_map, training_set)
                print(f"{name} on {Path(path).name}: l2 full {row.l2_full:.4g} (persistence "
                      f"{row.persistence_l2_full:.4g}), {row.trajectories} trajectories at {row.grid}", flush=True)
            except (OpzooError, OSError, ValueError) as e:
                row = ValidateRow(name, path, "failed", reason=" ".join(str(e).split()))
                print(f"{name} on {Path(path).name}: FAILED: {row.reason}", flush=True)
            rows.append(row)
            file_rows.append(row)
        paired_with_first(file_rows)
    order = {n: k for k, n in enumerate(names)}
    rows.sort(key=lambda r: (order.get(r.model, len(order)), list(data).index(r.file) if r.file in data else 0))
    write_rows(rows, out)
    return rows


def write_rows(rows: Sequence[ValidateRow], out: Path) -> None:
    from ..files import atomic_writer

    extra = list(dict.fromkeys(k for r in rows for k in r.plugin_metrics))  # plugins' metrics, before the reason
    columns = (*COLUMNS[:-1], *extra, COLUMNS[-1])
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(out) as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            values = (r.plugin_metrics.get(c, math.nan) if c in extra else getattr(r, c) for c in columns)
            w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in values])

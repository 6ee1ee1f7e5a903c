"""One cell of ``opzoo compare``: a (model, start, N, seed) as an ordinary ``opzoo finetune`` run, the one command
that reproduces it, its scores on the test split, and the score record kept beside it.

A cell's run directory is ``OUT/runs/<model>/<start>/n<N>/seed<s>/`` (locked, fingerprinted, resumable); its score
record is ``OUT/scores/<same>.json``, bound to the run by :func:`cell_digest` (the run's started config and the
exported model's config, which holds its weights' sha256) and checked on every read: a record of other weights is
stale (the cell is scored again), a record that is not what opzoo writes is refused in one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import ConfigError, OpzooError

SCORES_VERSION = 2
STARTS = ("pretrained", "scratch")
RECORD_LIMIT = 64 * 2**20  # bytes: a score record of ~10^5 test trajectories
COMMAND = "opzoo"


@dataclasses.dataclass(frozen=True)
class Cell:
    model: str
    start: str  # "pretrained" or "scratch"
    trajectories: int
    seed: int
    baseline: bool = False  # the baseline's cells stop early on validation within their own budget

    @property
    def key(self) -> str:
        return f"{safe_name(self.model)}/{self.start}/n{self.trajectories}/seed{self.seed}"


@dataclasses.dataclass
class CellResult:
    cell: Cell
    status: str  # "done", or why the cell has no scores ("refused: ...", "failed: ...", "not run (yet)")
    scores: dict[str, Any] = dataclasses.field(default_factory=dict)  # see score_model
    run_dir: str = ""
    record: dict[str, Any] = dataclasses.field(default_factory=dict)  # the score record's facts (lr, selection, ...)


def safe_name(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model).strip("._") or "model"


def cell_steps(cell: Cell, options) -> int:
    return options.baseline_steps if cell.baseline else options.steps


def cell_lr(cell: Cell, options) -> float:
    from ..training.finetune import recommended_lr

    return options.lr if options.lr is not None else recommended_lr(cell.model, cell.start == "pretrained")[0]


def run_dir_of(cell: Cell, out: Path) -> Path:
    return out / "runs" / cell.key


def cell_config(cell: Cell, data: Sequence[str], out: Path, options):
    """The cell's run config: ``opzoo finetune``'s, with the cell's N, seed and budget, validation selection (and,
    for the baseline, early stopping), a checkpoint at every evaluation (one kept besides the best)."""
    from ..training.finetune import finetune_config

    every = options.eval_every
    overrides: dict[str, Any] = {"evaluation.plots": False, "checkpoint.every": every, "checkpoint.keep_last": 1}
    if options.horizon is not None:
        overrides["data.horizon"] = options.horizon
    return finetune_config(cell.model, data, str(run_dir_of(cell, out)), steps=cell_steps(cell, options),
                           batch_size=options.batch_size, lr=cell_lr(cell, options), test_fraction=options.test_fraction,
                           pretrained=cell.start == "pretrained", layout=options.layout, fields=options.fields,
                           field_map=options.field_map, training_set=options.training_set,
                           train_trajectories=cell.trajectories, validation_fraction=options.validation_fraction,
                           selection="validation", early_stopping=options.patience if cell.baseline else None,
                           eval_every=every, seed=cell.seed, tune=cell_tune(cell, options),
                           max_memory=options.max_memory, overrides=overrides)


def cell_tune(cell: Cell, options) -> str:
    """What the cell trains: ``--tune`` for a model started from its weights; every parameter from random init (a
    frozen random network learns nothing) and for the baseline."""
    return options.tune if cell.start == "pretrained" and not cell.baseline else "full"


def cell_command(cell: Cell, data: Sequence[str], out: Path, options) -> list[str]:
    """The ``opzoo finetune`` command that runs the cell as the compare does (the same run config: a finished run of
    it is the compare's cell)."""
    argv = [COMMAND, "finetune", cell.model, "--pretrained" if cell.start == "pretrained" else "--no-pretrained",
            "--data", *data, "--out", str(run_dir_of(cell, out)), "--steps", str(cell_steps(cell, options)),
            "--batch-size", str(options.batch_size), "--lr", repr(cell_lr(cell, options)),
            "--test-fraction", repr(options.test_fraction), "--validation-fraction", repr(options.validation_fraction),
            "--train-trajectories", str(cell.trajectories), "--select", "validation",
            "--eval-every", str(options.eval_every), "--seed", str(cell.seed)]
    if cell.baseline:
        argv += ["--early-stopping", str(options.patience)]
    if cell_tune(cell, options) != "full":
        argv += ["--tune", cell_tune(cell, options)]
    if options.max_memory is not None:
        argv += ["--max-memory", repr(options.max_memory)]
    for flag, value in (("--layout", options.layout), ("--fields", ",".join(options.fields or []) or None),
                        ("--field-map", options.field_map), ("--training-set", options.training_set)):
        if value:
            argv += [flag, str(value)]
    sets = ["evaluation.plots=false", f"checkpoint.every={options.eval_every}", "checkpoint.keep_last=1"]
    if options.horizon is not None:
        sets.append(f"data.horizon={options.horizon}")
    return argv + ["--set", *sets]


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(argv)


# ---- training ------------------------------------------------------------------------------------------------------


def train_cell(cell: Cell, data: Sequence[str], out: Path, options) -> str:
    """Train (or resume, or find finished) the cell in this process: ``"done"`` or why not (``refused: ...``,
    ``failed: ...``). A stop by a signal (:class:`opzoo.training.stop.RunStopped`) is raised: it stops the compare."""
    from ..model_io.reference import model_reference
    from ..training.stop import RunStopped
    from ..training.trainer import Trainer

    if cell.start == "scratch" and model_reference(cell.model).saved:  # a saved model always loads its weights
        return (f"refused: {cell.model} is a saved model, which always brings its weights; name its preset or "
                f"backbone to train its architecture from random init (or --no-scratch)")
    try:
        safe_mkdir(run_dir_of(cell, out).parent, out)
        with quiet_fit():
            trainer = Trainer(cell_config(cell, data, out, options), show_progress=False)
            trainer.command = command_line(cell_command(cell, data, out, options))
            trainer.fit()
    except RunStopped:
        raise
    except OpzooError as e:
        return f"refused: {' '.join(str(e).split())}"
    except Exception as e:  # noqa: BLE001 - one cell's failure is its row; the other cells go on
        return f"failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return "done"


@contextlib.contextmanager
def quiet_fit():
    """A cell's run without its INFO lines (the fit block of every cell; the report shows each model's once)."""
    import logging

    log = logging.getLogger("opzoo")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(level)


def run_finished(run_dir: Path, steps: int) -> bool:
    from ..training.run_dir import is_finished

    return (run_dir / "model" / "config.json").is_file() and is_finished(run_dir, steps)


# ---- scores and their record ---------------------------------------------------------------------------------------


def cell_digest(run_dir: Path) -> str:
    """What binds a score record to its cell: the sha256 of the run's started config and of its exported model's
    ``config.json`` (which records the weights' sha256, checked whenever the model is loaded)."""
    h = hashlib.sha256()
    for p in (run_dir / "run_config.json", run_dir / "model" / "config.json"):
        h.update(p.read_bytes())
    return h.hexdigest()


def record_path(cell: Cell, out: Path) -> Path:
    return out / "scores" / f"{cell.key}.json"


def _bad(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path}: not a score record opzoo compare wrote ({why}); remove it, and the compare scores the "
                       f"cell again")


def _numbers(path: Path, where: str, values: Any, n: int, nullable: bool = False) -> list:
    if not isinstance(values, list) or len(values) != n:
        raise _bad(path, f"{where}: expected a list of {n} numbers")
    for v in values:
        if v is None and nullable:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise _bad(path, f"{where}: {v!r} is not a finite number >= 0")
    return values


def read_record(cell: Cell, out: Path, digest: str) -> dict[str, Any] | None:
    """The cell's score record, or None when there is none or it belongs to other weights or config (stale). A file
    that is not a record as opzoo writes it is a one-line ConfigError (bounded read, every field's type checked)."""
    from ..files import read_json

    path = record_path(cell, out)
    if not (path.exists() or path.is_symlink()):
        return None
    doc = read_json(path, "a compare score record", limit=RECORD_LIMIT, follow_links=False)
    if not isinstance(doc, dict):
        raise _bad(path, f"a {type(doc).__name__}, not an object")
    unknown = set(doc) - {"version", "cell", "digest", "scores", "seconds_per_step", "lr", "selection", "fit",
                          "costs", "command"}
    if unknown:
        raise _bad(path, f"unknown key(s) {sorted(unknown)[:5]}")
    if doc.get("version") != SCORES_VERSION or doc.get("cell") != cell.key:
        return None  # an older opzoo's record, or another cell's: scored again
    if doc.get("digest") != digest:
        return None
    scores = doc.get("scores")
    if not isinstance(scores, dict):
        raise _bad(path, "'scores' is not an object")
    tests = scores.get("test_trajectories")
    if not isinstance(tests, list) or not all(isinstance(t, list) and len(t) == 2 and isinstance(t[1], list)
                                             for t in tests):
        raise _bad(path, "'scores.test_trajectories' is not a list of [file, indices]")
    n = sum(len(t[1]) for t in tests)
    per = scores.get("per_trajectory")
    if not isinstance(per, dict):
        raise _bad(path, "'scores.per_trajectory' is not an object")
    for name, values in per.items():
        _numbers(path, f"scores.per_trajectory.{name}", values, n)
    functions = scores.get("per_function")
    if not isinstance(functions, dict) or not functions:
        raise _bad(path, "'scores.per_function' is not an object of functions")
    for name, values in functions.items():
        _numbers(path, f"scores.per_function.{name}", values, n, nullable=True)
    for key in ("pdebench", "pdebench_intervals", "not_available"):
        if not isinstance(scores.get(key, {}), dict):
            raise _bad(path, f"'scores.{key}' is not an object")
    if not isinstance(scores.get("predicted_from"), int) or not isinstance(scores.get("at_frame"), int):
        raise _bad(path, "'scores.predicted_from' and 'scores.at_frame' must be integers")
    for key in ("seconds_per_step", "lr"):
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise _bad(path, f"{key!r} is not a number")
    if not isinstance(doc.get("fit", []), list) or not all(isinstance(x, str) for x in doc.get("fit", [])):
        raise _bad(path, "'fit' is not a list of lines")
    if not isinstance(doc.get("selection") or {}, dict) or not isinstance(doc.get("costs") or {}, dict):
        raise _bad(path, "'selection' and 'costs' must be objects")
    return doc


def write_record(cell: Cell, out: Path, record: dict[str, Any]) -> None:
    from ..files import atomic_write, strict_json

    path = record_path(cell, out)
    safe_mkdir(path.parent, out)
    atomic_write(path, json.dumps(strict_json(record), allow_nan=False).encode())


def safe_mkdir(directory: Path, out: Path) -> None:
    """Create ``directory`` under ``out``, refusing a symbolic link on the way (a planted ``scores`` or ``runs``
    link would have the compare write, or train, in the link's target)."""
    import os

    here = out
    for part in directory.relative_to(out).parts:
        here = here / part
        if here.is_symlink():
            raise OpzooError(f"{here}: a symbolic link (to {os.readlink(here)}) inside the compare's directory; opzoo "
                             f"writes only real directories there: remove it")
        if here.exists() and not here.is_dir():
            raise OpzooError(f"{here}: a file where the compare keeps a directory: remove it")
        here.mkdir(exist_ok=True)


def seconds_per_step(run_dir: Path) -> float | None:
    """Wall-clock seconds per optimizer step of a run, from its log (each session's clock starts at 0 before its
    first step; the evaluations between steps included), or None when its log holds no step."""
    from ..training.logger import read_log

    try:
        records = read_log(run_dir / "log.jsonl")
    except OSError:
        return None
    sessions: list[list[float]] = []  # [step before the session, its last step, its clock at that step]
    for r in records:
        t, s = r.get("time"), r.get("step")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not isinstance(s, int):
            continue
        if not sessions or t < sessions[-1][2]:
            sessions.append([s - 1, s, float(t)])
        else:
            sessions[-1][1:] = [s, float(t)]
    steps = sum(last - before for before, last, _ in sessions)
    return sum(t for *_, t in sessions) / steps if steps > 0 else None


def run_facts(run_dir: Path) -> dict[str, Any]:
    """The lr, the selection and the fit block (as training read the files) of a finished cell's run."""
    from ..files import read_json

    started = read_json(run_dir / "run_config.json", "a run's started config", follow_links=False)
    model = read_json(run_dir / "model" / "config.json", "a saved model's config", follow_links=False)
    cfg = model.get("pretrained_cfg", {}) if isinstance(model, dict) else {}
    lr = started.get("optimizer", {}).get("lr") if isinstance(started, dict) else None
    return {"lr": lr if isinstance(lr, (int, float)) else None, "selection": cfg.get("selection") or {},
            "fit": [line for line in cfg.get("data_fit") or [] if isinstance(line, str)]}


def score_cell(cell: Cell, data: Sequence[str], out: Path, options, predicted_from: int) -> dict[str, Any]:
    """Score a finished cell on the test split (:func:`score_model`) and write its record; returns the record."""
    from ..model_io.loading import load

    run_dir = run_dir_of(cell, out)
    digest = cell_digest(run_dir)
    model = load(str(run_dir / "model")).eval()
    sources, frame_shape, _ = test_sources(cell_config(cell, data, out, options), model)
    with torch.no_grad():
        scores = score_model(model, sources, frame_shape, options.horizon, options.batch_size, predicted_from,
                             options.at_frame, options.functions)
    scores["train_trajectories"] = cell.trajectories
    record = {"version": SCORES_VERSION, "cell": cell.key, "digest": digest, "scores": scores,
              "seconds_per_step": seconds_per_step(run_dir), **run_facts(run_dir),
              "command": command_line(cell_command(cell, data, out, options))}
    write_record(cell, out, record)
    return record


def test_sources(cfg, model):
    """The run's test splits fitted to ``model`` (a cell's fine-tuned model): ``(sources, frame_shape, fit lines)``."""
    from ..evaluation.fit import fit_data
    from ..model_io.adapt import BOUNDARY_FIELDS
    from ..training.build import open_datasets

    opened = open_datasets(cfg)
    tests = [o.test for o in opened]
    fitted = fit_data(model, tests, cfg.data.resolution, "data.resolution",
                      field_map=[o.spec.field_map for o in opened], training_set=[o.spec.training_set for o in opened],
                      name=cfg.model.name, keep_boundary=bool(set(BOUNDARY_FIELDS) & set(cfg.model.args)))
    return fitted.sources, fitted.frame_shape, fitted.lines


def trajectory_scores(truth: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> tuple[dict[str, torch.Tensor],
                                                                                          dict[str, str]]:
    """Per trajectory (``[B, *S, H, C]`` each; ``mask [C]`` the channels that hold data): the relative L1 and L2
    errors and the VRMSE over the whole rollout (every predicted frame and channel pooled), and each protocol's VRMSE
    windows (:func:`opzoo.evaluation.protocols.window_scores`); ``({name: [B]}, {window: why it is n/a})``."""
    from ..evaluation.l2 import l2_full
    from ..evaluation.protocols import window_scores
    from ..evaluation.vrmse import vrmse

    v = vrmse(pred, truth)[..., mask]  # [B, H, fields]
    windows, missing = window_scores(v)
    p, u = pred[..., mask].double().flatten(1), truth[..., mask].double().flatten(1)
    out = {"rel_l1": (p - u).abs().sum(1) / u.abs().sum(1).clamp_min(1e-30), "rel_l2": l2_full(pred, truth, mask),
           "vrmse_all": v.mean((1, 2)), **windows}
    return {k: x.double().cpu() for k, x in out.items()}, missing


def score_model(model, sources, frame_shape, horizon: int | None, batch_size: int, predicted_from: int,
                at_frame: int | None = None, functions: Sequence[Sequence[str]] | None = None,
                at_file_grid: bool = False) -> dict[str, Any]:
    """Every test trajectory of ``sources`` rolled out by ``model`` from frame ``predicted_from`` on (the longest
    window of the compared models: all predict the same frames; ``at_file_grid``: run at each file's own grid, as
    persistence is) and scored at the file's grid: per trajectory the pooled errors and windows
    (:func:`trajectory_scores`), Poseidon's error per function at predicted frame ``at_frame`` (1 = the first
    predicted; default the last: :mod:`opzoo.evaluation.protocols`), and PDEBench's set (the plugins' metrics with
    it) with bootstrap intervals."""
    from ..evaluation.pdebench_metrics import TrajectoryMetrics, bootstrap
    from ..evaluation.protocols import functions_of, poseidon_errors
    from ..evaluation.rollouts import rollout_trajectories

    per: dict[str, list[torch.Tensor]] = {}
    per_function: dict[str, list[float | None]] = {}
    missing: dict[str, str] = {}
    pdebench = TrajectoryMetrics()
    count, tests = 0, []
    for src in sources:
        shape = frame_shape.at(src.spatial) if at_file_grid else frame_shape
        first = predicted_from - shape.in_timesteps
        names = src.channel_names
        for truth, pred, mask in rollout_trajectories(model, src, shape, horizon, batch_size, first=first):
            horizon_here = truth.shape[-2]
            frame = horizon_here - 1 if at_frame is None else at_frame - 1
            if frame >= horizon_here:
                raise ConfigError(f"--at-frame {at_frame}: the rollout of {src.path} predicts {horizon_here} frames")
            kept = [c for c in range(len(mask)) if mask[c] and c < len(names)]
            groups = functions_of([names[c] for c in kept], functions)
            errors = poseidon_errors(pred, truth, [[kept[i] for i in g] for _, g in groups], frame)
            b = truth.shape[0]
            for label in per_function:  # a function this file lacks: None for its trajectories
                if label not in [g for g, _ in groups]:
                    per_function[label] += [None] * b
            for j, (label, _) in enumerate(groups):
                per_function.setdefault(label, [None] * count)
                per_function[label] += errors[:, j].tolist()
            count += b
            scores, why = trajectory_scores(truth, pred, mask)
            missing.update(why)
            for k, v in scores.items():
                per.setdefault(k, []).append(v)
            pdebench.add(pred[..., mask].cpu(), truth[..., mask].cpu())
        tests.append([src.path, [int(i) for i in src.indices]])
    kept_scores = {k: torch.cat(v).tolist() for k, v in per.items() if sum(map(len, v)) == count}
    scores = {"per_trajectory": kept_scores, "per_function": per_function,
              "not_available": {k: v for k, v in missing.items() if k not in kept_scores},
              "pdebench": {k: v for k, v in pdebench.values().items()}, "grid": list(frame_shape.resolution),
              "predicted_from": predicted_from, "at_frame": at_frame or 0, "test_trajectories": tests}
    if len(pdebench) > 1:
        scores["pdebench_intervals"] = {k: list(v) for k, v in bootstrap(pdebench).items()}
    return scores


# ---- costs ---------------------------------------------------------------------------------------------------------


def model_costs(run_dir: Path, grid: Sequence[int], batch_size: int) -> dict[str, Any]:
    """Parameters, FLOPs of one training step (a batch at the cell's grid), the peak of a step as the one estimator
    gives it (:func:`opzoo.training.memory.estimate_step_memory`, every parameter trained), and the memory the step
    adds at its peak, measured once in a fresh process (:func:`opzoo.benchmark.measure.step_memory_mib`)."""
    from ..benchmark.measure import step_memory_mib
    from ..benchmark.presets import count_costs
    from ..model_io.loading import load

    model = load(str(run_dir / "model"))
    c = model.config
    x = torch.randn(batch_size, *grid, c.in_timesteps, c.in_channels)
    _, train, _ = count_costs(model, x)
    from ..training.memory import estimate_step_memory
    from ..training.memory_plan import meta_copy

    try:
        estimated = estimate_step_memory(meta_copy(model), tuple(x.shape)).total / 2**20
    except (RuntimeError, NotImplementedError):  # data-dependent ops on meta (MoE dispatch): on the real model
        estimated = estimate_step_memory(model, tuple(x.shape)).total / 2**20
    return {"memory_mib_estimated": estimated,"parameters": sum(p.numel() for p in model.parameters()), "gflop_per_step": train.flops / 1e9,
            "memory_mib_measured": step_memory_mib(str(run_dir / "model"), x.shape),
            "measured": time.strftime("%Y-%m-%d %H:%M %Z")}


def disk_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (links not followed)."""
    import os

    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def python_command(argv: Sequence[str]) -> list[str]:
    """``argv`` (``opzoo ...``) as this interpreter runs it (``python -m opzoo ...``)."""
    return [sys.executable, "-m", "opzoo", *argv[1:]]


__all__ = ["Cell", "CellResult", "STARTS", "cell_command", "cell_config", "cell_digest", "read_record", "score_cell",
           "score_model", "train_cell", "trajectory_scores"]

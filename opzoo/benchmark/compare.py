"""``opzoo compare``: which model for my data. Every model fine-tuned on the user's files under one budget, from its
published weights and from scratch, at nested numbers of training trajectories, beside a baseline trained to its
best, each selected on the same validation split and scored on the same held-out trajectories (docs/compare.md).

A *cell* is one (model, start, N, seed): an ordinary ``opzoo finetune`` run (:mod:`opzoo.benchmark.compare_cells`:
its config, the one command that reproduces it, its scores and their record). This module plans the cells and checks
the plan before the first one (every bound, N against each file's split, the frames, NaN anywhere in the data), holds
the compare's directory under the one output rule and one lock, refuses a re-run whose arguments changed before
writing anything, runs the cells (in this process, ``jobs`` at once in processes of their own, or as a plan of
commands for the user's scheduler), stops the whole compare on SIGTERM/SIGINT once the current cell has checkpointed,
and has :mod:`opzoo.benchmark.compare_report` write the report. Exit codes: :data:`EXIT_DONE` when every cell
finished, :data:`EXIT_INCOMPLETE` when some did not (the report still written, each such row saying why).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..errors import ConfigError, OpzooError
from .compare_cells import (
    STARTS,
    Cell,
    CellResult,
    cell_command,
    cell_config,
    cell_digest,
    cell_steps,
    command_line,
    disk_bytes,
    model_costs,
    python_command,
    read_record,
    run_dir_of,
    run_finished,
    safe_mkdir,
    score_cell,
    score_model,
    test_sources,
    train_cell,
    write_record,
)

MANIFEST = "compare.json"
MANIFEST_VERSION = 2
EXIT_DONE = 0
EXIT_INCOMPLETE = 1  # the report is written, but some cell was refused, failed or has not run
MAX_NS, MAX_N, MAX_SEEDS, MAX_STEPS, MAX_CELLS = 32, 10**7, 100, 10**9, 10_000
REPORT_FILES = ("compare.csv", "gains.csv", "compare.md", "compare.png")


@dataclasses.dataclass
class CompareOptions:
    """The budget, the protocol and the data flags every cell shares (compare.json records them: a re-run with any
    of them changed is refused)."""

    trajectories: tuple[int, ...] = (2, 8, 32)  # N: training trajectories per file (nested)
    steps: int = 200  # optimizer steps per cell: the budget (the same for every model, N and start)
    seeds: int = 1
    baseline: str | None = None  # default: an FNO of the data's dimension (fno-1d/2d/3d), from scratch
    scratch: bool = True  # each model also trained from random init
    batch_size: int = 8
    lr: float | None = None  # default: each model's recommended fine-tuning lr (from scratch: the pretraining lr)
    test_fraction: float = 0.1
    validation_fraction: float = 0.1  # held out before the test split, the same for every cell: selection only
    baseline_steps: int | None = None  # the baseline's cap (default 5 x steps); it stops early on validation
    patience: int = 5  # evaluations without a lower validation error before the baseline stops
    evaluations: int = 10  # validation evaluations in `steps` steps: every ceil(steps / evaluations) steps
    horizon: int | None = None  # rollout steps scored (default: every remaining frame)
    at_frame: int | None = None  # the predicted frame of Poseidon's error (1: the first; default: the last)
    functions: list[list[str]] | None = None  # Poseidon's functions, by field names (default: opzoo.evaluation.protocols)
    layout: str | None = None
    fields: list[str] | None = None
    field_map: str | None = None
    training_set: str | None = None
    tune: str = "full"  # what a cell from pretrained weights trains (full, head, lora[:RANK]); from scratch: full
    max_memory: float | None = None  # GiB a cell's step may hold (opzoo.training.memory_plan)

    def __post_init__(self) -> None:
        ns = self.trajectories
        if isinstance(ns, (str, bytes)) or not isinstance(ns, (list, tuple)) or not ns or len(ns) > MAX_NS or \
                not all(_int(n) and 1 <= n <= MAX_N for n in ns):
            raise ConfigError(f"--trajectories: 1 to {MAX_NS} whole numbers from 1 to {MAX_N}, comma-separated "
                              f"(e.g. 2,8,32), got {_shown(ns)}")
        self.trajectories = tuple(sorted({int(n) for n in ns}))
        for flag, value, low, high in (("--steps", self.steps, 1, MAX_STEPS), ("--seeds", self.seeds, 1, MAX_SEEDS),
                                       ("--batch-size", self.batch_size, 1, 100_000),
                                       ("--patience", self.patience, 1, 10_000),
                                       ("--evaluations", self.evaluations, 1, 10_000)):
            if not _int(value) or not low <= value <= high:
                raise ConfigError(f"{flag}: a whole number from {low} to {high}, got {_shown(value)}")
        if self.baseline_steps is None:
            self.baseline_steps = 5 * self.steps
        if not _int(self.baseline_steps) or not 1 <= self.baseline_steps <= MAX_STEPS:
            raise ConfigError(f"--baseline-steps: a whole number from 1 to {MAX_STEPS}, got {_shown(self.baseline_steps)}")
        for flag, value in (("--horizon", self.horizon), ("--at-frame", self.at_frame)):
            if value is not None and (not _int(value) or not 1 <= value <= 10**6):
                raise ConfigError(f"{flag}: a whole number from 1 to 1000000, got {_shown(value)}")
        if self.at_frame is not None and self.horizon is not None and self.at_frame > self.horizon:
            raise ConfigError(f"--at-frame {self.at_frame} lies beyond --horizon {self.horizon}")
        if self.lr is not None and (not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool)
                                    or not 0 < self.lr <= 10):
            raise ConfigError(f"--lr: a learning rate in (0, 10], got {_shown(self.lr)}")
        for flag, value in (("--test-fraction", self.test_fraction),
                            ("--validation-fraction", self.validation_fraction)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ConfigError(f"{flag}: a fraction in (0, 1), got {_shown(value)}")
        if self.test_fraction + self.validation_fraction >= 1:
            raise ConfigError("--test-fraction and --validation-fraction leave no trajectory to train on")
        for flag, value in (("--baseline", self.baseline), ("--layout", self.layout), ("--field-map", self.field_map),
                            ("--training-set", self.training_set)):
            if value is not None and (not isinstance(value, str) or len(value) > 10_000):
                raise ConfigError(f"{flag}: a text, got {_shown(value)}")
        for flag, value in (("--fields", self.fields), ("--functions", self.functions)):
            if value is not None and not _names(value, nested=flag == "--functions"):
                raise ConfigError(f"{flag}: field names, got {_shown(value)}")
        if not isinstance(self.scratch, bool):
            raise ConfigError(f"--scratch: true or false, got {_shown(self.scratch)}")
        from ..training.tuning import parse_tune

        self.tune = str(parse_tune(self.tune if isinstance(self.tune, str) else _shown(self.tune), "--tune"))
        if self.max_memory is not None and (isinstance(self.max_memory, bool) or not isinstance(
                self.max_memory, (int, float)) or not 0 < self.max_memory < 1e6):
            raise ConfigError(f"--max-memory: GiB, a number > 0, got {_shown(self.max_memory)}")

    @property
    def eval_every(self) -> int:
        return -(-self.steps // self.evaluations)

    @classmethod
    def from_record(cls, doc: Any, where: str) -> "CompareOptions":
        """The options a compare.json records, every key and type checked (one line naming the file)."""
        if not isinstance(doc, dict):
            raise ConfigError(f"{where}: 'options' is not an object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown option(s) {unknown[:5]} in 'options': not a record this opzoo writes")
        try:
            return cls(**doc)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: 'options' cannot be read ({type(e).__name__}): not a record this opzoo "
                              f"writes") from None


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _names(value: Any, nested: bool) -> bool:
    items = value if isinstance(value, list) else None
    if items is None or not items or len(items) > 1000:
        return False
    flat = [n for g in items for n in g] if nested and all(isinstance(g, list) for g in items) else \
        (None if nested else items)
    return flat is not None and all(isinstance(n, str) and 0 < len(n) <= 256 for n in flat)


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_trajectories(text: str) -> tuple[int, ...]:
    """``--trajectories``' text (``2,8,32``) as numbers, or a one-line ConfigError."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or len(parts) > MAX_NS or not all(p.isdigit() and len(p) <= 8 for p in parts):
        raise ConfigError(f"--trajectories: 1 to {MAX_NS} whole numbers, comma-separated (e.g. 2,8,32), got "
                          f"{_shown(text)}")
    return tuple(int(p) for p in parts)


def parse_functions(text: str | None) -> list[list[str]] | None:
    """``--functions u+v,p``: Poseidon's functions as groups of field names."""
    if not text:
        return None
    groups = [[n.strip() for n in g.split("+") if n.strip()] for g in text.split(",") if g.strip()]
    if not groups or any(not g for g in groups):
        raise ConfigError(f"--functions: groups of field names joined by '+', separated by ',' (e.g. u+v,p), got "
                          f"{_shown(text)}")
    return groups


# ---- the plan --------------------------------------------------------------------------------------------------------


def data_dimension(data: Sequence[str], layout: str | None, fields) -> int:
    from ..evaluation.fit import open_trajectories

    dims = {len(open_trajectories(p, layout, fields).spatial) for p in data}
    if len(dims) != 1:
        raise ConfigError(f"the files differ in their number of spatial dimensions ({sorted(dims)}): compare them apart")
    return dims.pop()


def default_baseline(data: Sequence[str], options: CompareOptions) -> str:
    return options.baseline or f"fno-{data_dimension(data, options.layout, options.fields)}d"


def has_weights(model: str) -> bool:
    """Whether ``model`` starts from pretrained weights (a preset that publishes some, or a saved model)."""
    from ..model_io.reference import model_reference
    from ..registry.registry import get_registry

    ref = model_reference(model)
    return ref.saved or (ref.kind == "preset" and get_registry().preset(ref.preset).pretrained is not None)


def plan_cells(models: Sequence[str], baseline: str, options: CompareOptions) -> list[Cell]:
    """Every cell: each model from its weights (if it has any) and from scratch (unless ``scratch=False``), the
    baseline from scratch only (on its own budget), at each N and seed."""
    cells = []
    for model in [baseline, *[m for m in models if m != baseline]]:
        starts = ["scratch"] if model == baseline else [s for s in STARTS if (
            s == "pretrained" and has_weights(model)) or (s == "scratch" and options.scratch)]
        cells += [Cell(model, s, n, seed, baseline=model == baseline) for s in starts for n in options.trajectories
                  for seed in range(options.seeds)]
    if len(cells) > MAX_CELLS:
        raise ConfigError(f"{len(cells)} cells planned, more than {MAX_CELLS}: fewer models, Ns or seeds")
    return cells


def window_of(model: str) -> int | None:
    """The input window ``T_in`` of ``model`` as a fine-tune starts it (a preset built on the meta device), or None
    when it cannot be had here (its cells are then refused rows, saying why)."""
    from ..model_io.loading import load

    try:
        with torch.device("meta"):
            return int(load(model).config.in_timesteps)
    except OpzooError:
        return None
    except Exception:  # noqa: BLE001 - a saved model that cannot be built on meta: load it
        try:
            return int(load(model).config.in_timesteps)
        except OpzooError:
            return None


@dataclasses.dataclass
class FileSplit:
    path: str
    trajectories: int
    frames: int
    test: int
    validation: int

    @property
    def pool(self) -> int:
        return self.trajectories - self.test - self.validation


def check_plan(data: Sequence[str], options: CompareOptions, predicted_from: int, scan: bool = True) -> list[FileSplit]:
    """Everything that can be known before the first cell, refused in one line: each file's split leaves the
    largest N to train on, its trajectories are long enough for the longest window (and ``--at-frame``), and
    (``scan``) no trajectory holds NaN or Inf where any cell would read it."""
    from ..data import split_trajectories
    from ..data.errors import DataFormatError
    from ..evaluation.bad_data import scan_trajectories
    from ..evaluation.fit import open_trajectories
    from ..training.build import validation_count

    splits = []
    for path in data:
        src = open_trajectories(path, options.layout, options.fields)
        try:
            train, test = split_trajectories(src, options.test_fraction)
        except DataFormatError as e:
            raise ConfigError(str(e)) from None
        split = FileSplit(path, len(src), src.n_steps, len(test), validation_count(options.validation_fraction, len(src)))
        largest = options.trajectories[-1]
        if split.pool < largest:
            raise ConfigError(
                f"--trajectories {largest}: {path} holds {split.trajectories} trajectories: {split.test} for testing "
                f"(--test-fraction {options.test_fraction:g}), {split.validation} for validation "
                f"(--validation-fraction {options.validation_fraction:g}), {max(split.pool, 0)} to train on; give "
                f"Ns of at most {max(split.pool, 0)} (or a larger file)")
        predicted = src.n_steps - predicted_from
        if options.horizon is not None:
            predicted = min(predicted, options.horizon)
        if predicted < 1:
            raise ConfigError(f"{path}: trajectories of {src.n_steps} frames leave nothing to predict after the "
                              f"longest window of the compared models ({predicted_from} frames)")
        if options.at_frame is not None and options.at_frame > predicted:
            raise ConfigError(f"--at-frame {options.at_frame}: {path} leaves {predicted} predicted frames after the "
                              f"longest window ({predicted_from} frames)")
        bad = scan_trajectories(src) if scan else []
        if bad:
            more = f" and {len(bad) - 1} more trajectory(ies)" if len(bad) > 1 else ""
            raise ConfigError(f"unusable data: {bad[0].describe()}{more}; no cell was trained. Repair or remove it "
                              f"(`opzoo data inspect {path}` lists every such trajectory)")
        splits.append(split)
    return splits


# ---- the directory -------------------------------------------------------------------------------------------------


def owned(path: Path) -> bool:
    """What a compare writes in its directory."""
    name = path.name
    return name in (MANIFEST, *REPORT_FILES, "runs", "scores", "logs", ".lock") or \
        (name.startswith("rollout-") and name.endswith(".png"))


def claim(out: Path, new: bool, say: Callable[[str], None]):
    """The one output rule and the compare's lock: ``out`` new, or holding only what a compare writes (no link at it,
    or at ``runs``/``scores``/``logs``); locked for the whole compare (a second compare there is refused, naming
    it); ``new`` first moves its contents aside."""
    from ..files import claim_output_dir
    from ..training.run_dir import move_aside

    claim_output_dir(out, owned, advice="pass --new to move them aside first")
    for name in ("runs", "scores", "logs"):
        p = out / name
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            raise OpzooError(f"--out {out}: {p} is {'a symbolic link' if p.is_symlink() else 'a file'}; a compare "
                             f"keeps a real directory there: remove it, or choose another --out")
    lock = CompareLock(out)
    lock.acquire()
    try:
        if new:
            moved = move_aside(out)
            if moved is not None:
                say(f"moved the previous contents of {out} to {moved}")
    except BaseException:
        lock.release()
        raise
    return lock


class CompareLock:
    """The compare's lock on its directory (:class:`opzoo.training.run_dir.RunDirLock`), said as a compare's."""

    def __init__(self, out: Path):
        from ..training.run_dir import RunDirLock

        self.inner = RunDirLock(out)

    def acquire(self) -> None:
        from ..training.run_dir import RunDirBusyError

        try:
            self.inner.acquire()
        except RunDirBusyError as e:
            raise OpzooError(str(e).replace("in use by another run", "in use by another compare")
                             .replace("choose another output_dir", "choose another --out")) from None

    def record_holder(self) -> None:
        self.inner.record_holder()

    def release(self) -> None:
        self.inner.release()


def manifest_document(models: Sequence[str], data: Sequence[str], options: CompareOptions, baseline: str,
                      command: str) -> dict[str, Any]:
    return {"version": MANIFEST_VERSION, "models": list(models), "data": list(data), "baseline": baseline,
            "options": dataclasses.asdict(options), "command": command}


def read_manifest(out: Path) -> dict[str, Any]:
    """``out``'s compare.json, checked: every key and type (one line naming the file)."""
    from ..files import read_json

    path = out / MANIFEST
    doc = read_json(path, "a compare's record", limit=4 * 2**20, follow_links=False)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a {type(doc).__name__}, not the object a compare writes")
    if doc.get("version") != MANIFEST_VERSION:
        raise ConfigError(f"{path}: written by an opzoo before the validation protocol (version {doc.get('version')!r}"
                          f"): its cells were neither selected on validation nor scored with Poseidon's error; run it "
                          f"again with --new (the old contents are moved aside)")
    unknown = sorted(set(doc) - {"version", "models", "data", "baseline", "options", "command"})
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown[:5]}: not a record this opzoo writes")
    for key in ("models", "data"):
        v = doc.get(key)
        if not isinstance(v, list) or not v or len(v) > 1000 or \
                not all(isinstance(x, str) and 0 < len(x) <= 4096 for x in v):
            raise ConfigError(f"{path}: {key!r} is not a list of names")
    if not isinstance(doc.get("baseline"), str) or not isinstance(doc.get("command", ""), str):
        raise ConfigError(f"{path}: 'baseline' and 'command' must be texts")
    doc["options"] = CompareOptions.from_record(doc.get("options"), str(path))
    return doc


def plan_changes(kept: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every planning argument that differs between a recorded compare and a request."""
    changes = []
    for key in ("models", "data", "baseline"):
        if kept[key] != wanted[key]:
            changes.append(f"{key}: {json.dumps(kept[key])} -> {json.dumps(wanted[key])}")
    old, new = dataclasses.asdict(kept["options"]), wanted["options"]
    for key in old:
        if old[key] != new[key] and not (isinstance(old[key], (list, tuple)) and list(old[key]) == list(new[key])):
            changes.append(f"{key}: {json.dumps(old[key])} -> {json.dumps(new[key])}")
    return changes


# ---- stopping ------------------------------------------------------------------------------------------------------


class CompareStop:
    """SIGTERM/SIGINT while a compare runs: the current cell (whose own run checkpoints and stops) ends the compare;
    between cells the flag is read before the next one starts. A second signal interrupts at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        self.signum = signum

    def __enter__(self) -> "CompareStop":
        import threading

        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def stop(self, after: str):
        from ..training.stop import RunStopped

        name = signal.Signals(self.signum or signal.SIGTERM).name
        raise RunStopped(f"{name}: the compare stopped {after}; every finished cell is kept and an unfinished one "
                         f"resumes from its last checkpoint: re-run the same command to go on", self.signum or 15)


# ---- running -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class CompareResult:
    out: Path
    baseline: str
    options: CompareOptions
    cells: list[CellResult]
    persistence: dict[str, Any]
    costs: dict[str, dict[str, Any]]
    models: list[str]
    data: list[str]
    command: str = ""
    splits: list[FileSplit] = dataclasses.field(default_factory=list)
    written: list[Path] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_DONE if self.cells and all(r.status == "done" for r in self.cells) else EXIT_INCOMPLETE


def compare(models: Sequence[str], data: Sequence[str], out: str | Path, options: CompareOptions | None = None,
            say: Callable[[str], None] = print, command: str = "", *, jobs: int = 1, new: bool = False,
            plan_file: str | Path | None = None) -> CompareResult | None:
    """Plan and check every cell, then train (``jobs`` at once), score and report them (see the module doc);
    ``plan_file``: write the cells' commands there instead of training (``None`` is returned)."""
    options = options or CompareOptions()
    out = Path(out).absolute()
    data = [str(Path(p).absolute()) for p in data]
    if not models:
        raise ConfigError("name one or more models to compare")
    if not _int(jobs) or not 1 <= jobs <= 256:
        raise ConfigError(f"--jobs: a whole number from 1 to 256, got {_shown(jobs)}")
    baseline = default_baseline(data, options)
    cells = plan_cells(models, baseline, options)
    windows = {m: window_of(m) for m in dict.fromkeys(c.model for c in cells)}
    if not any(w is not None for w in windows.values()):
        raise ConfigError("none of the models can be built here: " + ", ".join(windows))
    predicted_from = max(w for w in windows.values() if w is not None)  # every model predicts the same frames
    splits = check_plan(data, options, predicted_from)
    lock = claim(out, new, say)
    try:
        wanted = manifest_document(models, data, options, baseline, command)
        recorded = (out / MANIFEST).exists() or (out / MANIFEST).is_symlink()
        if recorded:
            kept = read_manifest(out)
            changes = plan_changes(kept, wanted)
            if changes:
                raise ConfigError(f"{out} holds a compare of other arguments ({'; '.join(changes)}); nothing was "
                                  f"written. Run it with its recorded arguments to resume or re-render it, pass --new "
                                  f"to move it aside (to {out}.replaced-<time>), or choose another --out")
        elif any((out / name).exists() for name in ("runs", "scores")):
            raise ConfigError(f"{out} holds the cells of a compare whose {MANIFEST} is gone, so nothing shows which "
                              f"arguments they were trained with; pass --new to move them aside, or restore it")
        lock.record_holder()  # only now: a refused compare leaves the directory as it was, its lock file included
        if not recorded:
            from ..files import atomic_write

            atomic_write(out / MANIFEST, json.dumps(wanted, indent=1).encode())
        if plan_file is not None:
            write_plan(Path(plan_file), cells, data, out, options, say)
            return None
        say(f"compare: {len(cells)} cells ({', '.join(windows)}; N = {', '.join(map(str, options.trajectories))}; "
            f"{options.seeds} seed(s); {options.steps} steps each, the baseline up to {options.baseline_steps} with "
            f"early stopping) in {out}")
        with CompareStop() as stop:
            statuses = run_cells(cells, data, out, options, stop, jobs, predicted_from, say)
        return finish(out, models, data, options, baseline, cells, statuses, predicted_from, splits, say, command)
    finally:
        lock.release()


def write_plan(path: Path, cells: Sequence[Cell], data: Sequence[str], out: Path, options: CompareOptions,
               say: Callable[[str], None]) -> None:
    from ..console import output_file
    from ..files import atomic_write

    output_file(str(path), "--plan")
    lines = [command_line(cell_command(c, data, out, options)) for c in cells]
    atomic_write(path, "".join(line + "\n" for line in lines))
    say(f"wrote {len(lines)} commands, one per cell, to {path}: run them in any order and anywhere that sees "
        f"{out} (a Slurm job array: docs/compare.md), then `opzoo compare --report {out}`")


def run_cells(cells: Sequence[Cell], data: Sequence[str], out: Path, options: CompareOptions, stop: CompareStop,
              jobs: int, predicted_from: int, say: Callable[[str], None]) -> dict[Cell, str]:
    """Train every cell that is not finished and score every finished one; ``{cell: status}``."""
    from tqdm import tqdm

    from ..training.stop import RunStopped

    statuses: dict[Cell, str] = {}
    bar = tqdm(total=len(cells), desc="compare", unit="cell", disable=None)

    def scored(cell: Cell, status: str) -> None:
        if status == "done":
            status = ensure_scored(cell, data, out, options, predicted_from)
        if status != "done":
            say(f"{cell.key}: {status}")
        statuses[cell] = status
        bar.update(1)

    try:
        if jobs == 1:
            for cell in cells:
                if stop.signum is not None:
                    stop.stop(f"before cell {cell.key}")
                try:
                    status = train_cell(cell, data, out, options)
                except RunStopped as e:
                    raise RunStopped(f"{e} (cell {cell.key}); the compare stopped: re-run the same compare command "
                                     f"to resume", e.signum) from None
                scored(cell, status)
                if stop.signum is not None:
                    stop.stop(f"after cell {cell.key}")
        else:
            run_in_processes(cells, data, out, options, stop, jobs, scored)
    finally:
        bar.close()
    return statuses


def run_in_processes(cells: Sequence[Cell], data: Sequence[str], out: Path, options: CompareOptions,
                     stop: CompareStop, jobs: int, scored: Callable[[Cell, str], None]) -> None:
    """``jobs`` cells at once, each its ``opzoo finetune`` command in a process of its own with the threads divided
    between them (its output in ``OUT/logs/<cell>.log``); a stop is passed on to every running cell, which
    checkpoints, and the compare stops when they have."""
    threads = max(1, torch.get_num_threads() // jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    pending = list(cells)
    running: dict[subprocess.Popen, tuple[Cell, Any]] = {}
    ended: list[tuple[Cell, str]] = []  # cells whose process ended, to score (after the free slots are filled)
    signalled = False
    try:
        while pending or running or ended:
            for proc in [p for p in running if p.poll() is not None]:
                cell, log = running.pop(proc)
                log.close()
                # the run's own record decides: a process that ended badly after its run finished (its model
                # exported, finished.json written) leaves a finished cell
                finished = run_finished(run_dir_of(cell, out), cell_steps(cell, options))
                ended.append((cell, "done" if finished else child_status(proc.returncode, Path(log.name))))
            while pending and len(running) < jobs and stop.signum is None:
                cell = pending.pop(0)
                run_dir = run_dir_of(cell, out)
                if run_finished(run_dir, cell_steps(cell, options)):
                    ended.append((cell, "done"))
                    continue
                refusal = scratch_refusal(cell)
                if refusal:
                    ended.append((cell, refusal))
                    continue
                log_path = out / "logs" / f"{cell.key}.log"
                safe_mkdir(log_path.parent, out)
                safe_mkdir(run_dir.parent, out)
                log = open(log_path, "w")
                argv = python_command(cell_command(cell, data, out, options))
                running[subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)] = (cell, log)
            if stop.signum is not None and not signalled:
                for proc in running:
                    proc.send_signal(stop.signum)  # each cell's run checkpoints and stops
                signalled = True
            if ended:  # one at a time: the slots are filled again between two
                scored(*ended.pop(0))
            elif stop.signum is not None and not running:
                stop.stop("after its running cells checkpointed")
            else:
                time.sleep(0.1)
    finally:
        for proc, (_, log) in running.items():  # an interrupt: the cells are told, and waited for
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, (_, log) in running.items():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def scratch_refusal(cell: Cell) -> str | None:
    from ..model_io.reference import model_reference

    if cell.start == "scratch" and model_reference(cell.model).saved:
        return (f"refused: {cell.model} is a saved model, which always brings its weights; name its preset or "
                f"backbone to train its architecture from random init (or --no-scratch)")
    return None


def child_status(code: int, log: Path) -> str:
    """A cell process's exit as its row's status: 0 done; 2 a refusal (its one-line error); else a failure."""
    if code == 0:
        return "done"
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    last = lines[-1] if lines else f"exit code {code}"
    if code == 2 and "error: " in last:
        return f"refused: {last.split('error: ', 1)[1][:300]}"
    return f"failed: {last[:300]} (exit code {code}; its output: {log})"


def ensure_scored(cell: Cell, data: Sequence[str], out: Path, options: CompareOptions, predicted_from: int) -> str:
    """A finished cell's score record, made if there is none for its weights: ``"done"`` or why not."""
    run_dir = run_dir_of(cell, out)
    try:
        record = read_record(cell, out, cell_digest(run_dir))
        if record is None or record["scores"].get("predicted_from") != predicted_from:
            score_cell(cell, data, out, options, predicted_from)
    except OpzooError as e:
        return f"refused: {' '.join(str(e).split())}"
    return "done"


def collect(cells: Sequence[Cell], out: Path, options: CompareOptions, predicted_from: int,
            statuses: dict[Cell, str]) -> list[CellResult]:
    """Each cell's row: its score record, or why it has none."""
    results = []
    for cell in cells:
        run_dir = run_dir_of(cell, out)
        status = statuses.get(cell)
        if status is not None and status != "done":
            results.append(CellResult(cell, status))
            continue
        if not run_finished(run_dir, cell_steps(cell, options)):
            results.append(CellResult(cell, "not run (yet)" if not run_dir.exists() else
                                      "unfinished: re-run the compare (or the cell's command) to resume it"))
            continue
        record = read_record(cell, out, cell_digest(run_dir))
        if record is None or record["scores"].get("predicted_from") != predicted_from:
            results.append(CellResult(cell, "not scored for these weights: re-run the compare"))
            continue
        results.append(CellResult(cell, "done", record["scores"], str(run_dir), record))
    return results


def persistence_scores(done: CellResult, data: Sequence[str], out: Path, options: CompareOptions,
                       predicted_from: int) -> dict[str, Any]:
    """The persistence baseline (the last input frame repeated) on the same test trajectories and frames, at each
    file's grid."""
    from ..evaluation.rollouts import Persistence
    from ..model_io.loading import load

    sources, frame_shape, _ = test_sources(cell_config(done.cell, data, out, options),
                                           load(str(Path(done.run_dir) / "model")))
    with torch.no_grad():
        return score_model(Persistence(), sources, frame_shape, options.horizon, options.batch_size, predicted_from,
                           options.at_frame, options.functions, at_file_grid=True)


def costs_of(results: Sequence[CellResult], out: Path, options: CompareOptions) -> dict[str, dict[str, Any]]:
    """Per model: its costs, measured once on one of its cells and kept in that cell's score record (never measured
    again when the report is rendered); the seconds per step of its cells (from their logs) and their disk use."""
    costs: dict[str, dict[str, Any]] = {}
    for model in dict.fromkeys(r.cell.model for r in results):
        mine = [r for r in results if r.cell.model == model and r.status == "done"]
        if not mine:
            continue
        holder = next((r for r in mine if r.record.get("costs")), None)
        if holder is None:
            holder = mine[0]
            grid = holder.scores.get("grid") or [16]
            holder.record["costs"] = model_costs(Path(holder.run_dir), grid, options.batch_size)
            write_record(holder.cell, out, holder.record)
        seconds = [r.record.get("seconds_per_step") for r in mine if r.record.get("seconds_per_step")]
        costs[model] = {**holder.record["costs"],
                        "seconds_per_step": sorted(seconds)[len(seconds) // 2] if seconds else None,
                        "disk_mib": sum(disk_bytes(Path(r.run_dir)) for r in mine) / 2**20 / len(mine)}
    return costs


def finish(out: Path, models: Sequence[str], data: Sequence[str], options: CompareOptions, baseline: str,
           cells: Sequence[Cell], statuses: dict[Cell, str], predicted_from: int, splits: Sequence[FileSplit],
           say: Callable[[str], None], command: str) -> CompareResult:
    """Collect the rows, persistence and costs, write the report and the rollout pictures, and say what was
    written."""
    from .compare_report import rollout_pictures, write_report

    results = collect(cells, out, options, predicted_from, statuses)
    done = [r for r in results if r.status == "done"]
    persistence = persistence_scores(done[0], data, out, options, predicted_from) if done else {}
    result = CompareResult(out, baseline, options, results, persistence, costs_of(results, out, options),
                           list(models), list(data), command, list(splits))
    result.written = write_report(result)
    if done:
        result.written += rollout_pictures(result)
    finished = sum(r.status == "done" for r in results)
    say(f"{finished} of {len(results)} cells finished; wrote " + ", ".join(p.name for p in result.written) +
        f" in {out}" + ("" if result.exit_code == EXIT_DONE else
                        f" (exit code {EXIT_INCOMPLETE}: the rows of the others say why)"))
    return result


def report(out: str | Path, say: Callable[[str], None] = print) -> CompareResult:
    """Re-render ``out``'s report from its finished cells (trains nothing; a finished cell not yet scored, as one
    run from ``--plan``'s commands, is scored now), labelled by what compare.json and each cell's run recorded."""
    out = Path(out).absolute()
    if not (out / MANIFEST).exists():
        raise ConfigError(f"--report {out}: no {MANIFEST} there: not the directory of an opzoo compare")
    lock = claim(out, False, say)
    try:
        kept = read_manifest(out)
        lock.record_holder()
        options, models, data, baseline = kept["options"], kept["models"], kept["data"], kept["baseline"]
        cells = plan_cells(models, baseline, options)
        windows = [w for w in map(window_of, dict.fromkeys(c.model for c in cells)) if w is not None]
        if not windows:
            raise ConfigError("none of the models can be built here: " + ", ".join(dict.fromkeys(models)))
        predicted_from = max(windows)
        statuses = {}
        for cell in cells:
            if run_finished(run_dir_of(cell, out), cell_steps(cell, options)):
                statuses[cell] = ensure_scored(cell, data, out, options, predicted_from)
        splits = check_plan(data, options, predicted_from, scan=False)
        return finish(out, models, data, options, baseline, cells, statuses, predicted_from, splits, say,
                      kept.get("command", ""))
    finally:
        lock.release()


__all__ = ["Cell", "CellResult", "CompareOptions", "CompareResult", "EXIT_DONE", "EXIT_INCOMPLETE", "compare",
           "parse_functions", "parse_trajectories", "plan_cells", "report", "score_model"]

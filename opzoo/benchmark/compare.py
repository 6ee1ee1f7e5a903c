"""``opzoo compare``: which model for my data. Every model fine-tuned on the user's files under one budget, from its
published weights and from scratch, at nested numbers of training trajectories, beside a baseline trained from scratch,
scored on the same held-out trajectories (docs/compare.md).

A *cell* is one (model, start, N, seed): an ordinary fine-tune run directory under ``OUT/runs/`` (locked,
fingerprinted, resumable: an interrupted compare resumes, a finished cell is never redone, a changed config is refused
as runs refuse it), trained on the first N trajectories of each file's training split (``train_trajectories``: the
cells of a smaller N see a subset of a larger N's, and every model sees the same ones), then scored on each file's
test split at the file's own grid (:func:`score_model`); the scores are kept beside it (``OUT/scores/``, keyed by the
run's weights) so that a re-run re-reads them. A model that cannot take the files gets rows that say why, and the rest
of the comparison goes on. :mod:`opzoo.benchmark.compare_report` writes the tables, gains and pictures.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..errors import ConfigError, OpzooError

SCORES_VERSION = 1
STARTS = ("pretrained", "scratch")


@dataclasses.dataclass
class CompareOptions:
    """The budget and the data flags every cell shares."""

    trajectories: tuple[int, ...] = (2, 8, 32)  # N: training trajectories per file (nested)
    steps: int = 200  # optimizer steps per cell: the budget (the same for every model, N and start)
    seeds: int = 1
    baseline: str | None = None  # default: an FNO of the data's dimension (fno-1d/2d/3d), from scratch
    scratch: bool = True  # each model also trained from random init
    batch_size: int = 8
    lr: float | None = None  # default: each model's recommended fine-tuning lr (from scratch: the pretraining lr)
    test_fraction: float = 0.1
    horizon: int | None = None  # rollout steps scored (default: every remaining frame)
    layout: str | None = None
    fields: list[str] | None = None
    field_map: Any = None
    training_set: str | None = None

    def __post_init__(self) -> None:
        self.trajectories = tuple(sorted({int(n) for n in self.trajectories}))
        if not self.trajectories or self.trajectories[0] < 1:
            raise ConfigError(f"--trajectories: positive numbers, got {list(self.trajectories)}")
        if self.steps < 1 or self.seeds < 1 or self.batch_size < 1:
            raise ConfigError("--steps, --seeds and --batch-size must be >= 1")


@dataclasses.dataclass(frozen=True)
class Cell:
    model: str
    start: str  # "pretrained" or "scratch"
    trajectories: int
    seed: int

    @property
    def key(self) -> str:
        return f"{safe_name(self.model)}/{self.start}/n{self.trajectories}/seed{self.seed}"


@dataclasses.dataclass
class CellResult:
    cell: Cell
    status: str  # "done", or why the cell has no scores ("refused: ...", "failed: ...")
    scores: dict[str, Any] = dataclasses.field(default_factory=dict)  # see score_model
    run_dir: str = ""
    seconds_per_step: float | None = None  # measured while this compare trained it (None: trained earlier)


def safe_name(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model).strip("._") or "model"


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
    baseline from scratch only, at each N and seed."""
    cells = []
    for model in [baseline, *[m for m in models if m != baseline]]:
        starts = ["scratch"] if model == baseline else [s for s in STARTS if (
            s == "pretrained" and has_weights(model)) or (s == "scratch" and options.scratch)]
        cells += [Cell(model, s, n, seed) for s in starts for n in options.trajectories for seed in range(options.seeds)]
    return cells


def cell_config(cell: Cell, data: Sequence[str], out: Path, options: CompareOptions):
    """The cell's run config: ``opzoo finetune``'s, with the cell's N and seed."""
    from ..training.finetune import finetune_config

    # the run evaluates its test split at step 0 and at the end only: the cell is scored by score_model
    overrides = {"seed": cell.seed, "evaluation.plots": False, "training.eval_every": options.steps}
    cfg = finetune_config(cell.model, data, str(out / "runs" / cell.key), steps=options.steps,
                          batch_size=options.batch_size, lr=options.lr, test_fraction=options.test_fraction,
                          pretrained=cell.start == "pretrained", layout=options.layout, fields=options.fields,
                          field_map=options.field_map, training_set=options.training_set, overrides=overrides)
    for d in cfg.data.datasets:
        d.train_trajectories = cell.trajectories
    cfg.data.horizon = options.horizon
    return cfg


def weights_digest(model_dir: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(model_dir.glob("*.safetensors")):
        h.update(p.read_bytes())
    return h.hexdigest()


# ---- scoring -------------------------------------------------------------------------------------------------------


def trajectory_scores(truth: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per trajectory (``[B, *S, H, C]`` each; ``mask [C]`` the channels that hold data): VRMSE at the first step and
    over predicted frames 1-20 and 21-60 (Walrus's windows, where the rollout is that long) and over the rollout, and
    the relative L2 and L1 errors over the rollout. ``{name: [B]}``."""
    from ..evaluation.l2 import l2_full
    from ..evaluation.vrmse import vrmse

    v = vrmse(pred, truth)[..., mask].mean(-1)  # [B, H]
    out = {"vrmse_1": v[:, 0], "vrmse_all": v.mean(1)}
    if v.shape[1] >= 20:
        out["vrmse_1_20"] = v[:, :20].mean(1)
    if v.shape[1] >= 60:
        out["vrmse_21_60"] = v[:, 20:60].mean(1)
    out["rel_l2"] = l2_full(pred, truth, mask)
    p, u = pred[..., mask].double().flatten(1), truth[..., mask].double().flatten(1)
    out["rel_l1"] = (p - u).abs().sum(1) / u.abs().sum(1).clamp_min(1e-30)
    return {k: x.double().cpu() for k, x in out.items()}


def score_model(model, sources, frame_shape, horizon: int | None, batch_size: int, predicted_from: int,
                at_file_grid: bool = False) -> dict[str, Any]:
    """Every test trajectory of ``sources`` rolled out by ``model`` (``at_file_grid``: run at each file's own grid,
    as persistence is) and scored at the file's grid: the per-trajectory scores (:func:`trajectory_scores`, in file
    order; a window only where every trajectory is long enough) and PDEBench's set with its bootstrap intervals.
    Every model predicts the frames from ``predicted_from`` on (the longest window of the compared models), from the
    window just before it, so that all are scored on the same frames."""
    from ..evaluation.pdebench_metrics import TrajectoryMetrics, bootstrap
    from ..evaluation.rollouts import rollout_trajectories

    per: dict[str, list[torch.Tensor]] = {}
    pdebench = TrajectoryMetrics()
    count = 0
    for src in sources:
        shape = frame_shape.at(src.spatial) if at_file_grid else frame_shape
        first = predicted_from - shape.in_timesteps
        for truth, pred, mask in rollout_trajectories(model, src, shape, horizon, batch_size, first=first):
            count += truth.shape[0]
            for k, v in trajectory_scores(truth, pred, mask).items():
                per.setdefault(k, []).append(v)
            pdebench.add(pred[..., mask].cpu(), truth[..., mask].cpu())
    scores = {"per_trajectory": {k: torch.cat(v).tolist() for k, v in per.items() if sum(map(len, v)) == count},
              "pdebench": pdebench.values(), "grid": list(frame_shape.resolution), "predicted_from": predicted_from}
    if len(pdebench) > 1:
        scores["pdebench_intervals"] = {k: list(v) for k, v in bootstrap(pdebench).items()}
    return scores


def test_sources(cfg, model):
    """The run's test splits fitted to ``model`` (a cell's fine-tuned model): ``(sources, frame_shape, fit lines)``."""
    from ..evaluation.fit import fit_data
    from ..training.build import open_datasets

    opened = open_datasets(cfg)
    tests = [o.test for o in opened]
    fitted = fit_data(model, tests, cfg.data.resolution, "data.resolution",
                      field_map=[o.spec.field_map for o in opened], training_set=[o.spec.training_set for o in opened],
                      name=cfg.model.name, keep_boundary="periodic" in cfg.model.args)
    return fitted.sources, fitted.frame_shape, fitted.lines


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


def run_cell(cell: Cell, data: Sequence[str], out: Path, options: CompareOptions,
             say: Callable[[str], None] = print, train: bool = True, predicted_from: int = 1) -> CellResult:
    """Train (or resume, or find finished) and score one cell; a model that cannot take the files, or a run that
    fails, is a result with its reason. ``train=False``: only a cell already scored is read (``--report``)."""
    from ..model_io.loading import load
    from ..model_io.reference import model_reference
    from ..training.trainer import Trainer

    if cell.start == "scratch" and model_reference(cell.model).saved:  # a saved model always loads its weights
        return CellResult(cell, f"refused: {cell.model} is a saved model, which always brings its weights; name its "
                                f"preset or backbone to train its architecture from random init (or --no-scratch)")
    if not train:
        cache = out / "scores" / f"{cell.key}.json"
        run_dir = out / "runs" / cell.key
        if not cache.is_file() or not (run_dir / "model").is_dir():
            return CellResult(cell, "not run (yet)")
        kept = json.loads(cache.read_text())
        if kept.get("weights") != weights_digest(run_dir / "model") or \
                kept["scores"].get("predicted_from") != predicted_from:
            return CellResult(cell, "not scored as this report needs: re-run the compare")
        return CellResult(cell, "done", kept["scores"], str(run_dir), kept.get("seconds_per_step"))
    try:
        cfg = cell_config(cell, data, out, options)
        run_dir = Path(cfg.output_dir)
        trainer = Trainer(cfg, show_progress=False)
        began = time.perf_counter()
        result = trainer.fit()
        seconds = None if result.already_finished else (time.perf_counter() - began) / cfg.training.steps
    except OpzooError as e:
        return CellResult(cell, f"refused: {' '.join(str(e).split())}")
    except Exception as e:  # noqa: BLE001 - one cell's failure is its row; the other cells go on
        return CellResult(cell, f"failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    model_dir = run_dir / "model"
    digest = weights_digest(model_dir)
    cache = out / "scores" / f"{cell.key}.json"
    if cache.is_file():
        kept = json.loads(cache.read_text())
        if kept.get("weights") == digest and kept.get("version") == SCORES_VERSION and \
                kept["scores"].get("predicted_from") == predicted_from:
            return CellResult(cell, "done", kept["scores"], str(run_dir), kept.get("seconds_per_step"))
    model = load(str(model_dir)).eval()
    sources, frame_shape, lines = test_sources(cfg, model)
    with torch.no_grad():
        scores = score_model(model, sources, frame_shape, options.horizon, options.batch_size, predicted_from)
    scores["fit"] = lines
    scores["test_trajectories"] = [[s.path, list(s.indices)] for s in sources]
    scores["train_trajectories"] = cell.trajectories
    from ..files import atomic_write

    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(cache, json.dumps({"version": SCORES_VERSION, "weights": digest, "seconds_per_step": seconds,
                                    "scores": scores}).encode())
    return CellResult(cell, "done", scores, str(run_dir), seconds)


def persistence_scores(cell: CellResult, data: Sequence[str], out: Path, options: CompareOptions,
                       predicted_from: int) -> dict[str, Any]:
    """The persistence baseline (the last input frame repeated) on the same test trajectories, at each file's grid,
    with the window of a finished cell's model."""
    from ..evaluation.rollouts import Persistence
    from ..model_io.loading import load

    cfg = cell_config(cell.cell, data, out, options)
    sources, frame_shape, _ = test_sources(cfg, load(str(Path(cell.run_dir) / "model")))
    with torch.no_grad():
        return score_model(Persistence(), sources, frame_shape, options.horizon, options.batch_size, predicted_from,
                           at_file_grid=True)


def model_costs(model_name: str, cell_result: CellResult, options: CompareOptions) -> dict[str, Any]:
    """Parameters, FLOPs of one training step (a batch at the cell's grid), its peak memory (measured in a fresh
    process: :func:`opzoo.benchmark.measure.step_memory_mib`; and an estimate: weights, gradients and Adam's two
    moments, 4 x 4 bytes per parameter, plus the activations a step saves), and the measured seconds per step of this
    machine."""
    from ..benchmark.measure import step_memory_mib
    from ..benchmark.presets import count_costs
    from ..model_io.loading import load

    model_dir = Path(cell_result.run_dir) / "model"
    model = load(str(model_dir))
    c = model.config
    grid = cell_result.scores.get("grid") or [16] * int(getattr(c, "spatial_dims", 2))
    x = torch.randn(options.batch_size, *grid, c.in_timesteps, c.in_channels)
    _, train, activations = count_costs(model, x)
    params = sum(p.numel() for p in model.parameters())
    return {"parameters": params, "gflop_per_step": train.flops / 1e9, "memory_mib_estimate":
            (16 * params + activations) / 2**20, "memory_mib_measured": step_memory_mib(str(model_dir), x.shape),
            "seconds_per_step": cell_result.seconds_per_step}


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


def rollout_pictures(result: CompareResult) -> None:
    """One test trajectory rolled out by each model's cell at the largest N (seed 0, from its weights if it has
    them)."""
    from ..evaluation.plots import plot_rollout_panels
    from ..evaluation.rollouts import rollout_trajectories
    from ..model_io.loading import load

    largest = result.options.trajectories[-1]
    for model in dict.fromkeys(r.cell.model for r in result.cells):
        cells = [r for r in result.cells if r.cell.model == model and r.status == "done"
                 and r.cell.trajectories == largest and r.cell.seed == 0]
        if not cells:
            continue
        r = min(cells, key=lambda c: c.cell.start != "pretrained")
        net = load(str(Path(r.run_dir) / "model")).eval()
        sources, frame_shape, _ = test_sources(cell_config(r.cell, result.data, result.out, result.options), net)
        with torch.no_grad():
            first = r.scores.get("predicted_from", frame_shape.in_timesteps) - frame_shape.in_timesteps
            truth, pred, _ = next(rollout_trajectories(net, sources[0], frame_shape, result.options.horizon, 1,
                                                       first=first))
        horizon = truth.shape[-2]
        plot_rollout_panels(truth[0], pred[0], sorted({1, max(1, horizon // 2), horizon}),
                            result.out / f"rollout-{safe_name(model)}.png",
                            title=f"{model} ({r.cell.start}, N={largest}): test trajectory 0")


MANIFEST = "compare.json"


def compare(models: Sequence[str], data: Sequence[str], out: str | Path, options: CompareOptions | None = None,
            say: Callable[[str], None] = print, command: str = "", train: bool = True) -> CompareResult:
    """Run every cell (see the module doc), score it, and write the report (:func:`compare_report.write_report`);
    ``train=False`` writes the report from the cells already scored (:func:`report`)."""
    from tqdm import tqdm

    from ..files import atomic_write
    from .compare_report import write_report

    options = options or CompareOptions()
    out, data = Path(out), [str(p) for p in data]
    if not models:
        raise ConfigError("name one or more models to compare")
    baseline = default_baseline(data, options)
    if train:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / MANIFEST, json.dumps({"models": list(models), "data": data, "command": command,
                                                 "options": dataclasses.asdict(options)}, indent=1).encode())
    cells = plan_cells(models, baseline, options)
    windows = [w for w in map(window_of, dict.fromkeys(c.model for c in cells)) if w is not None]
    if not windows:
        raise ConfigError("none of the models can be built here: " + ", ".join(dict.fromkeys(c.model for c in cells)))
    predicted_from = max(windows)  # every model predicts the same frames
    say(f"compare: {len(cells)} cells ({', '.join(dict.fromkeys(c.model for c in cells))}; N = "
        f"{', '.join(map(str, options.trajectories))}; {options.seeds} seed(s); {options.steps} steps each) in {out}")
    results = []
    for cell in tqdm(cells, desc="compare", unit="cell", disable=None):
        r = run_cell(cell, data, out, options, say, train, predicted_from)
        if r.status != "done":
            say(f"{cell.key}: {r.status}")
        results.append(r)
    done = [r for r in results if r.status == "done"]
    persistence = persistence_scores(done[0], data, out, options, predicted_from) if done else {}
    costs = {}
    for model in dict.fromkeys(r.cell.model for r in done):  # a cell timed by this compare, if one was
        mine = sorted((r for r in done if r.cell.model == model), key=lambda r: r.seconds_per_step is None)
        costs[model] = model_costs(model, mine[0], options)
    result = CompareResult(out, baseline, options, results, persistence, costs, list(models), data)
    paths = write_report(result, say, command)
    if any(r.status == "done" for r in results):
        rollout_pictures(result)
    say(f"wrote {', '.join(str(p) for p in paths.values())} and the rollout pictures in {out}")
    return result


def report(out: str | Path, say: Callable[[str], None] = print) -> CompareResult:
    """Re-render ``out``'s report from its finished, scored cells (nothing is trained)."""
    path = Path(out) / MANIFEST
    if not path.is_file():
        raise ConfigError(f"--report {out}: no {MANIFEST} there: not the directory of an opzoo compare")
    kept = json.loads(path.read_text())
    options = CompareOptions(**{**kept["options"], "trajectories": tuple(kept["options"]["trajectories"])})
    return compare(kept["models"], kept["data"], out, options, say, kept.get("command", ""), train=False)


__all__ = ["Cell", "CellResult", "CompareOptions", "CompareResult", "compare", "plan_cells", "report",
           "rollout_pictures", "score_model", "trajectory_scores"]

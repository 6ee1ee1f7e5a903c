"""μTransfer-FNO (Li et al. 2025, Algorithm 1) on opzoo's Trainer: sweep on the proxy, rescale, train the target.

A mutransfer config (YAML or JSON) holds an opzoo run config template and a sweep::

    output_dir: runs/mutransfer
    run: {seed: 0, model: {name: fno-1d, args: {width: 32}}, data: ..., optimizer: ..., training: ...}
    sweep:
      proxy_modes: 4              # K_proxy: the hook's base_modes under μP
      target_modes: 32            # K*
      landscape_modes: [8, 16]    # optional: also sweep these K (the paper's Figure 1)
      lr: [1.0e-3, 3.0e-3, 1.0e-2]
      batch_size: null            # optional list; null: the run's training.batch_size
      betas: null                 # optional list of [b1, b2]; null: the run's optimizer.betas
      seeds: [0]
      parametrizations: [standard, mup]
      mup: {grad_clip: null}      # further mup-fno args (base_modes is proxy_modes)
      modes_key: modes            # model.args key of the Fourier modes ("mixer_args.modes" for POT)
      metric: test                # test: final test l2 full; train: mean loss of the last 10 % of steps

Every run ``(parametrization, K, lr, batch size, betas, seed)`` is one Trainer run in
``output_dir/runs/<parametrization>/K<K>/<hyper>-s<seed>/`` with ``result.json`` written last; a
restarted sweep skips finished runs and an interrupted run resumes from its checkpoint. A μP run at
the proxy's K (every multiplier 1, no clipping) is the standard run and is trained once.
Algorithm 1: ξ* = argmin over the proxy's grid of the seed-mean loss (line 2); under μP the
target trains with ``mup-fno`` at ``base_modes = K_proxy``, which multiplies the spectral weights'
lr by ``sqrt(log N_proxy / log N*)`` and their init std by the same (init variance by its square;
lines 4-5); under standard parametrization ξ* is used unchanged. Outputs: ``sweep.csv``,
``transfer.json`` and ``lr_landscape.png`` (loss vs lr, one curve per K, optimum starred, standard
and μP side by side).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import opzoo
from opzoo.training import Trainer, TrainingDivergedError, parse_run_config, read_document, read_log

from .mup_fno import ADAM_OPTIMIZERS, HOOK_NAME, non_adam_error

PARAMETRIZATIONS = ("standard", "mup")
CSV_FIELDS = ("parametrization", "K", "lr", "batch_size", "beta1", "beta2", "seed", "loss", "train_loss",
              "status", "seconds", "run_dir")


@dataclasses.dataclass
class SweepSection:
    proxy_modes: int
    target_modes: int
    lr: list[float]
    landscape_modes: list[int] = dataclasses.field(default_factory=list)
    batch_size: Optional[list[int]] = None
    betas: Optional[list[tuple[float, float]]] = None
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    parametrizations: list[str] = dataclasses.field(default_factory=lambda: list(PARAMETRIZATIONS))
    mup: dict[str, Any] = dataclasses.field(default_factory=dict)
    modes_key: str = "modes"
    metric: Literal["test", "train"] = "test"


@dataclasses.dataclass
class MutransferConfig:
    run: dict[str, Any]
    sweep: SweepSection
    output_dir: str = "runs/mutransfer"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run of the sweep."""

    parametrization: str
    modes: int
    lr: float
    batch_size: int
    betas: tuple[float, float]
    seed: int

    @property
    def hyper(self) -> tuple[float, int, tuple[float, float]]:
        return (self.lr, self.batch_size, self.betas)

    def key(self) -> str:
        return (f"{self.parametrization}/K{self.modes}/lr{self.lr:.6g}-bs{self.batch_size}"
                f"-b{self.betas[0]:g},{self.betas[1]:g}-s{self.seed}")


def load_config(path: str | os.PathLike, output_dir: str | None = None, device: str | None = None) -> MutransferConfig:
    """Read and validate a mutransfer config completely (the run template too) before any training."""
    source = str(path)
    document = read_document(path)
    try:
        cfg = opzoo.build_dataclass(MutransferConfig, document, "")
    except opzoo.ConfigError as e:
        raise opzoo.ConfigError(f"{source}: {str(e).lstrip(': ')}") from None
    if output_dir is not None:
        cfg.output_dir = output_dir
    if device is not None:
        cfg.run.setdefault("training", {})["device"] = device
    s = cfg.sweep

    def fail(msg: str):
        raise opzoo.ConfigError(f"{source}: {msg}")

    for key in ("proxy_modes", "target_modes"):
        if getattr(s, key) < 1:
            fail(f"sweep.{key}: must be >= 1, got {getattr(s, key)}")
    if any(k < 1 for k in s.landscape_modes):
        fail(f"sweep.landscape_modes: modes must be >= 1, got {s.landscape_modes}")
    if not s.lr or any(not (v > 0 and math.isfinite(v)) for v in s.lr):
        fail(f"sweep.lr: expected a non-empty list of positive learning rates, got {s.lr}")
    if s.batch_size is not None and (not s.batch_size or any(b < 1 for b in s.batch_size)):
        fail(f"sweep.batch_size: expected a non-empty list of ints >= 1, got {s.batch_size}")
    if s.betas is not None and (not s.betas or any(len(b) != 2 or not all(0 <= x < 1 for x in b) for b in s.betas)):
        fail(f"sweep.betas: expected a non-empty list of [beta1, beta2] pairs in [0, 1), got {s.betas}")
    if not s.seeds:
        fail("sweep.seeds: list at least one seed")
    bad = [p for p in s.parametrizations if p not in PARAMETRIZATIONS]
    if bad or not s.parametrizations:
        fail(f"sweep.parametrizations: expected a non-empty subset of {list(PARAMETRIZATIONS)}, got {s.parametrizations}")
    if "base_modes" in s.mup:
        fail("sweep.mup.base_modes: set by mutransfer (it is sweep.proxy_modes)")
    if "mup" in s.parametrizations:
        try:
            opzoo.get_registry().get("optimizer_hook", HOOK_NAME)(base_modes=s.proxy_modes, **s.mup)  # validates args
        except TypeError as e:
            fail(f"sweep.mup: {e}")
        section = cfg.run.get("optimizer")
        optimizer = str(section.get("name", "adamw")) if isinstance(section, dict) else "adamw"
        if optimizer not in ADAM_OPTIMIZERS and not s.mup.get("allow_non_adam", False):
            fail(f"run.optimizer.name: {str(non_adam_error(optimizer)).replace('allow_non_adam', 'sweep.mup.allow_non_adam')}")
        if s.proxy_modes < 2:
            fail(f"sweep.proxy_modes: μP needs at least 2 kept modes (log N0 > 0), got {s.proxy_modes}")
        for key, values in (("target_modes", [s.target_modes]), ("landscape_modes", s.landscape_modes)):
            if any(K < 2 for K in values):
                fail(f"sweep.{key}: μP needs at least 2 kept modes (log N > 0), got {getattr(s, key)}")
    if "output_dir" in cfg.run:
        fail("run.output_dir: set the top-level output_dir instead (each run gets its own folder under it)")
    _anchor_data_paths(cfg.run, Path(source).resolve().parent)
    # the whole template must be a valid run config at every K (and the proxy one per parametrization)
    for K in all_modes(s):
        parse_run_config(run_document(cfg, RunSpec(s.parametrizations[-1], K, s.lr[0], *first_hyper(cfg), s.seeds[0]),
                                      Path(cfg.output_dir) / "check"), f"{source}: run (K={K})", Path(source).parent)
    return cfg


def _anchor_data_paths(run: dict[str, Any], config_dir: Path) -> None:
    """Relative data paths that are not under the working directory but are next to the config
    become absolute, so that every run finds what validation found (as ``opzoo train`` resolves)."""
    datasets = run.get("data", {}).get("datasets", []) if isinstance(run.get("data"), dict) else []
    for d in datasets if isinstance(datasets, list) else []:
        for key in ("path", "test_path"):
            p = d.get(key) if isinstance(d, dict) else None
            if isinstance(p, str) and not Path(p).is_absolute() and not Path(p).exists() and (config_dir / p).exists():
                d[key] = str(config_dir / p)


def all_modes(s: SweepSection) -> list[int]:
    """Every K the sweep trains: the proxy, the landscape and the target."""
    return sorted({s.proxy_modes, s.target_modes, *s.landscape_modes})


def first_hyper(cfg: MutransferConfig) -> tuple[int, tuple[float, float]]:
    t, o = cfg.run.get("training", {}), cfg.run.get("optimizer", {})
    bs = cfg.sweep.batch_size[0] if cfg.sweep.batch_size else int(t.get("batch_size", 16))
    betas = tuple(cfg.sweep.betas[0]) if cfg.sweep.betas else tuple(o.get("betas", (0.9, 0.9)))
    return bs, betas


def hyper_grid(cfg: MutransferConfig) -> list[tuple[float, int, tuple[float, float]]]:
    """The search space Ξ: lr × batch size × betas."""
    t, o = cfg.run.get("training", {}), cfg.run.get("optimizer", {})
    sizes = cfg.sweep.batch_size or [int(t.get("batch_size", 16))]
    betas = [tuple(map(float, b)) for b in cfg.sweep.betas] if cfg.sweep.betas else [tuple(map(float, o.get("betas", (0.9, 0.9))))]
    return [(float(lr), int(bs), b) for lr in cfg.sweep.lr for bs in sizes for b in betas]


def _set_dotted(mapping: dict, dotted: str, value: Any, defaults: Any = None) -> None:
    """``mapping[a][b]... = value`` for ``dotted = "a.b..."``; a missing parent starts as a copy of
    ``defaults``' (the preset's args), since a model override replaces a whole nested dict."""
    *parents, last = dotted.split(".")
    for p in parents:
        defaults = defaults.get(p) if isinstance(defaults, dict) else None
        if p not in mapping:
            mapping[p] = copy.deepcopy(dict(defaults)) if isinstance(defaults, dict) else {}
        mapping = mapping[p]
    mapping[last] = value


def run_document(cfg: MutransferConfig, spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """The opzoo run config of one sweep run (template + K, seed, hyper-parameters, μP hook)."""
    doc = copy.deepcopy(cfg.run)
    doc["output_dir"] = str(run_dir)
    doc["seed"] = spec.seed
    model = doc.setdefault("model", {})
    registry = opzoo.get_registry()
    preset_args = dict(registry.preset(model["name"]).args) if registry.has_preset(model.get("name", "")) else None
    _set_dotted(model.setdefault("args", {}), cfg.sweep.modes_key, spec.modes, preset_args)
    opt = doc.setdefault("optimizer", {})
    opt["lr"], opt["betas"] = spec.lr, list(spec.betas)
    doc.setdefault("training", {})["batch_size"] = spec.batch_size
    hooks = [h for h in opt.get("hooks", []) if h.get("name") != HOOK_NAME]
    if spec.parametrization == "mup":
        hooks.append({"name": HOOK_NAME, "args": {"base_modes": cfg.sweep.proxy_modes, **cfg.sweep.mup}})
    opt["hooks"] = hooks
    return doc


def trained_as(cfg: MutransferConfig, spec: RunSpec) -> RunSpec:
    """The run that gives ``spec``'s result: a μP run at the proxy's K is the standard run when both
    are swept and nothing but the c = 1 multipliers would differ (no gradient clipping), so it is
    trained once."""
    s = cfg.sweep
    if (spec.parametrization == "mup" and spec.modes == s.proxy_modes and "standard" in s.parametrizations
            and s.mup.get("grad_clip") is None):
        return dataclasses.replace(spec, parametrization="standard")
    return spec


def train_one(cfg: MutransferConfig, spec: RunSpec, root: Path, source: str = "mutransfer") -> dict[str, Any]:
    """Train one run (or read its finished result): ``{loss, train_loss, status, seconds, run_dir}``."""
    run_dir = root / "runs" / spec.key()
    done = run_dir / "result.json"
    if done.is_file():  # finished before (the folder may have been copied from another sweep)
        result = opzoo.read_json(done, "a finished run's result")
        if not isinstance(result, dict):
            raise opzoo.ConfigError(f"{done}: not a finished run's result (a JSON object); remove {run_dir} to train "
                                    f"it again")
        return {**result, "run_dir": str(run_dir)}
    run_cfg = parse_run_config(run_document(cfg, spec, run_dir), f"{source}: {spec.key()}")
    t0 = time.perf_counter()
    status, loss, train_loss = "ok", math.inf, math.inf
    try:
        result = Trainer(run_cfg, show_progress=False).fit()
        evals = result.evals[run_cfg.training.steps]
        test = sum(r.l2_full for r in evals) / len(evals)
        losses = [r["loss"] for r in read_log(run_dir / "log.jsonl", kind="train")]
        tail = losses[-max(1, len(losses) // 10):]
        train_loss = sum(tail) / len(tail)
        loss = test if cfg.sweep.metric == "test" else train_loss
        if not math.isfinite(loss):
            status, loss = "diverged", math.inf
    except TrainingDivergedError:
        status = "diverged"
    record = {"loss": loss, "train_loss": train_loss, "status": status,
              "seconds": round(time.perf_counter() - t0, 2), "run_dir": str(run_dir)}
    opzoo.atomic_write(done, json.dumps(record))
    return record


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.inf


def seed_mean(rows: list[dict], parametrization: str, modes: int) -> dict[tuple, float]:
    """``{(lr, batch size, betas): mean loss over seeds}`` of one curve (inf when any seed diverged)."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        if r["parametrization"] == parametrization and r["K"] == modes:
            groups.setdefault((r["lr"], r["batch_size"], (r["beta1"], r["beta2"])), []).append(r["loss"])
    return {k: _mean(v) for k, v in groups.items()}


def best_hyper(rows: list[dict], parametrization: str, modes: int) -> tuple[tuple, float]:
    """Algorithm 1, line 2: ``argmin_ξ train(ξ, K)`` (the seed-mean loss)."""
    means = seed_mean(rows, parametrization, modes)
    if not means or all(not math.isfinite(v) for v in means.values()):
        raise opzoo.OpzooError(f"every {parametrization} run at K={modes} diverged; lower sweep.lr")
    key = min(means, key=lambda k: means[k])
    return key, means[key]


def write_csv(rows: list[dict], path: Path) -> Path:
    with opzoo.atomic_writer(path) as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, lineterminator="\r\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in CSV_FIELDS})
    return path


def landscape_curves(rows: list[dict], fixed: dict[str, tuple] | None = None) -> dict[str, dict[int, dict]]:
    """``{parametrization: {K: {"points": [(lr, seed-mean loss)...] sorted by lr, "best": (lr, loss)}}}``
    over the finite points; ``fixed[p] = (batch size, betas)`` keeps only those (the proxy's optimum)
    when other hyper-parameters were swept too."""
    curves: dict[str, dict[int, dict]] = {}
    for p in PARAMETRIZATIONS:
        for K in sorted({r["K"] for r in rows if r["parametrization"] == p}):
            means = seed_mean(rows, p, K)
            if fixed and p in fixed:
                means = {k: v for k, v in means.items() if k[1:] == fixed[p]}
            pts = sorted((k[0], v) for k, v in means.items() if math.isfinite(v))
            if pts:
                curves.setdefault(p, {})[K] = {"points": pts, "best": min(pts, key=lambda t: t[1])}
    return curves


def draw_landscape(rows: list[dict], fixed: dict[str, tuple] | None = None, title: str = ""):
    """The matplotlib figure of :func:`plot_landscape`: one panel per parametrization (standard |
    μP) sharing the y axis, one curve per K, each curve's optimum starred (the paper's Figure 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = landscape_curves(rows, fixed)
    fig, axes = plt.subplots(1, max(1, len(curves)), figsize=(5.2 * max(1, len(curves)), 4.0), sharey=True,
                             squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, (p, per_k) in zip(axes[0], curves.items()):
        for j, (K, curve) in enumerate(per_k.items()):
            color = cmap(j / max(1, len(per_k) - 1))
            ax.plot(*zip(*curve["points"]), "o-", color=color, ms=3, label=f"K = {K}")
            ax.plot(*([v] for v in curve["best"]), "*", color=color, ms=15, mec="k", mew=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("learning rate")
        ax.set_title({"standard": "standard parametrization", "mup": "μTransfer-FNO (μP)"}[p])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("loss (mean over seeds)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_landscape(rows: list[dict], path: Path, fixed: dict[str, tuple] | None = None, title: str = "") -> Path:
    """Write :func:`draw_landscape` as a PNG."""
    import matplotlib.pyplot as plt

    from opzoo.evaluation import save_figure

    return save_figure(plt, draw_landscape(rows, fixed, title), path, dpi=110)


SWEEP_FILES = ("runs", "check", "sweep.csv", "lr_landscape.png", "transfer.json")  # what a sweep writes in output_dir


def run_mutransfer(cfg: MutransferConfig, progress: bool = True, source: str = "mutransfer") -> dict[str, Any]:
    """Algorithm 1 plus the landscape sweep; returns the ``transfer.json`` summary."""
    from tqdm.auto import tqdm

    s = cfg.sweep
    root = opzoo.claim_output_dir(cfg.output_dir, lambda p: p.name in SWEEP_FILES, flag="output_dir",
                                  what="the sweep", advice="choose another output_dir (--out)")
    root.mkdir(parents=True, exist_ok=True)
    grid = hyper_grid(cfg)
    sweep_modes = sorted({s.proxy_modes, *s.landscape_modes})
    specs = [RunSpec(p, K, lr, bs, betas, seed) for p in s.parametrizations for K in sweep_modes
             for (lr, bs, betas) in grid for seed in s.seeds]
    rows: list[dict] = []

    def record(spec: RunSpec) -> dict:
        out = train_one(cfg, trained_as(cfg, spec), root, source)
        row = {"parametrization": spec.parametrization, "K": spec.modes, "lr": spec.lr, "batch_size": spec.batch_size,
               "beta1": spec.betas[0], "beta2": spec.betas[1], "seed": spec.seed, **out}
        rows.append(row)
        return row

    done = sum((root / "runs" / trained_as(cfg, sp).key() / "result.json").is_file() for sp in specs)
    bar = tqdm(specs, desc="sweep", unit="run", disable=not progress, initial=0)
    if done:
        bar.write(f"resuming: {done} of {len(specs)} sweep runs already finished")
    for spec in bar:
        bar.set_postfix_str(spec.key())
        record(spec)
        write_csv(rows, root / "sweep.csv")
    bar.close()

    summary: dict[str, Any] = {"proxy_modes": s.proxy_modes, "target_modes": s.target_modes,
                               "metric": s.metric, "parametrizations": {}}
    fixed = {}
    for p in s.parametrizations:
        (lr, bs, betas), proxy_loss = best_hyper(rows, p, s.proxy_modes)
        fixed[p] = (bs, betas)
        per_k = {}
        for K in sweep_modes:
            (k_lr, k_bs, k_betas), k_loss = best_hyper(rows, p, K)
            per_k[str(K)] = {"best_lr": k_lr, "best_batch_size": k_bs, "best_betas": list(k_betas), "loss": k_loss}
        # Algorithm 1, lines 3-7: train the target with ξ* (μP rescales spectral lr and init via the hook)
        target_losses = []
        for seed in s.seeds:
            row = record(RunSpec(p, s.target_modes, lr, bs, betas, seed)) if s.target_modes not in sweep_modes else next(
                r for r in rows if r["parametrization"] == p and r["K"] == s.target_modes and r["seed"] == seed
                and (r["lr"], r["batch_size"], (r["beta1"], r["beta2"])) == (lr, bs, betas))
            target_losses.append(row["loss"])
        entry = {"proxy_best": {"lr": lr, "batch_size": bs, "betas": list(betas), "loss": proxy_loss},
                 "target": {"lr": lr, "batch_size": bs, "betas": list(betas), "loss": _mean(target_losses)},
                 "best_per_K": per_k}
        if p == "mup":
            n_p, n_t = s.proxy_modes, s.target_modes
            entry["target"]["spectral_init_and_lr_multiplier"] = (
                math.sqrt(math.log(n_p) / math.log(n_t)) if n_p >= 2 and n_t >= 2 else None)
        if s.target_modes in sweep_modes:
            entry["target"]["best_possible_loss"] = per_k[str(s.target_modes)]["loss"]
            entry["target"]["regret"] = entry["target"]["loss"] / per_k[str(s.target_modes)]["loss"]
        summary["parametrizations"][p] = entry
    write_csv(rows, root / "sweep.csv")
    plot_landscape([r for r in rows if r["K"] in sweep_modes], root / "lr_landscape.png", fixed,
                   title=f"{source}: loss vs learning rate (seeds {s.seeds})")
    opzoo.atomic_write(root / "transfer.json", json.dumps(summary, indent=2))
    return summary

"""``opzoo demo`` (``make demo``): pretrained operators by name, rolled out and fine-tuned on new physics.

1. ``opzoo.load("dpot-micro", pretrained=True)`` and ``opzoo.load("aot-pot-micro", pretrained=True)``:
   weights that ship inside opzoo-fourier and opzoo-aot, loaded offline through the presets'
   pretrained sources (the code path of Hub weights).
2. Held-out trajectories of the four pretraining PDEs, generated with new seeds: l2 full of each
   model and of the persistence baseline (the last input frame repeated).
3. A PDE neither model saw (Navier–Stokes at a third viscosity, ν = 1e-5): aot-pot-micro fine-tuned
   for a few hundred steps next to the same architecture trained from scratch with the same budget;
   zero-shot / fine-tuned / from-scratch errors.
4. ``demo.png`` (ground truth / prediction / error, both models) and ``error-vs-step.png``.

Needs no network and runs in about 3 minutes on 2 CPU cores.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from opzoo import claim_output_dir, load
from opzoo.data import FrameShape, TrajectoryDataset, content_hash, split_trajectories
from opzoo.evaluation import DatasetResult, evaluate_dataset, field2d, persistence_result, pyplot, save_figure
from opzoo.micro import MICRO_SUITE
from opzoo.training import generate_dataset

MODELS = ("dpot-micro", "aot-pot-micro")
# the unseen PDE: Navier–Stokes at a viscosity the micro models were not pretrained on
UNSEEN = ("ns-nu1e-5", {"kind": "ns", "res": 32, "nu": 1.0e-5, "steps": 20, "record_dt": 0.5})
HELD_OUT_SEED = 1000
UNSEEN_SEED = 2000
FINETUNE_TEST_FRACTION = 0.2


@dataclass
class FinetuneResult:
    zero_shot: DatasetResult
    finetuned: DatasetResult
    scratch: DatasetResult
    run_dirs: tuple[Path, Path]


def make_data(kind_args: dict, path: Path, n: int, seed: int) -> Path:
    if not path.is_file():
        generate_dataset({**kind_args, "n": n, "seed": seed}, path, progress=True)
    return path


def evaluate_on(models: dict[str, nn.Module], files: dict[str, Path], frame_shape: FrameShape) -> dict[str, dict[str, tuple]]:
    """``{dataset: {model: (DatasetResult, (truth, pred) of trajectory 0)}}`` over whole trajectories."""
    out: dict[str, dict[str, tuple]] = {}
    for name, path in files.items():
        source = TrajectoryDataset(str(path))
        out[name] = {m: evaluate_dataset(model, name, source, frame_shape, keep_first=True) for m, model in models.items()}
        out[name]["persistence"] = (persistence_result(name, source, frame_shape), None)  # the one persistence
    return out


def demo_run_dir(parent: Path, label: str, cfg, train_file: Path, base_weights: str = "") -> Path:
    """``<parent>/aot-pot-micro-<label>-<key>``: ``key`` is a hash of what defines the run (its config but
    the harmless keys, the training data's bytes, and ``base_weights``, a digest of the weights it starts from), so
    a demo re-run with the same arguments and weights finds its finished run again, and one with other arguments or
    other shipped weights (an upgraded opzoo-aot) trains in a directory of its own; nothing is moved or deleted."""
    from opzoo.training import flatten_config, is_harmless

    defining = {k: v for k, v in flatten_config(cfg.to_dict()).items() if not is_harmless(k)}
    text = json.dumps(defining, sort_keys=True, default=str) + content_hash(train_file) + base_weights
    return parent / f"aot-pot-micro-{label}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def weights_digest(model: nn.Module) -> str:
    """sha256 of a model's tensors (names, dtypes, shapes and values)."""
    h = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        h.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        h.update(value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def finetune_unseen(train_file: Path, out_dir: Path, steps: int, lr: float, batch_size: int, seed: int,
                    base_weights: str = "") -> FinetuneResult:
    """aot-pot-micro fine-tuned on ``train_file`` vs the same architecture from scratch, same budget.

    A run that a previous demo finished with the same config and data is reused (its evaluations
    are read back from ``eval/``); an interrupted one resumes.
    """
    from opzoo.evaluation import read_results
    from opzoo.training import Trainer, finetune_config

    runs = {}
    for label, pretrained in (("finetuned", True), ("scratch", False)):
        args = dict(steps=steps, batch_size=batch_size, lr=lr, test_fraction=FINETUNE_TEST_FRACTION,
                    pretrained=pretrained, overrides={"seed": seed, "evaluation.plots": False, "training.log_every": 10})
        provisional = finetune_config("aot-pot-micro", [str(train_file)], str(out_dir), **args)  # output_dir: harmless
        run_dir = demo_run_dir(out_dir, label, provisional, train_file, base_weights if pretrained else "")
        print(f"  {'fine-tuning the pretrained' if pretrained else 'training from scratch the'} aot-pot-micro, "
              f"{steps} steps -> {run_dir}")
        result = Trainer(finetune_config("aot-pot-micro", [str(train_file)], str(run_dir), **args)).fit()
        if result.already_finished:
            print(f"  reusing that finished run (same config and data; remove {run_dir} to train it again)")
            evals = {s: read_results(run_dir / "eval" / f"step-{s:08d}.json") for s in (0, steps)}
        else:
            evals = result.evals
        runs[label] = (evals, run_dir)
    ft, scratch = runs["finetuned"][0], runs["scratch"][0]
    return FinetuneResult(ft[0][0], ft[steps][0], scratch[steps][0], (runs["finetuned"][1], runs["scratch"][1]))


def _relative_change(new: float, old: float) -> str:
    return f"{100 * (new - old) / old:+.1f} %"


def print_table(results: dict[str, dict[str, tuple]]) -> None:
    names = list(next(iter(results.values())))
    print("\nheld-out trajectories (new seeds), l2 full over the whole rollout (lower is better)")
    print(f"  {'dataset':<20}" + "".join(f"{n:>15}" for n in names) + f"{'aot vs dpot':>13}")
    changes = []
    for ds, per_model in results.items():
        row = {m: r[0].l2_full for m, r in per_model.items()}
        changes.append((row["aot-pot-micro"] - row["dpot-micro"]) / row["dpot-micro"])
        print(f"  {ds:<20}" + "".join(f"{row[n]:>15.4f}" for n in names)
              + f"{_relative_change(row['aot-pot-micro'], row['dpot-micro']):>13}")
    means = {n: float(np.mean([per[n][0].l2_full for per in results.values()])) for n in names}
    print(f"  {'mean':<20}" + "".join(f"{means[n]:>15.4f}" for n in names)
          + f"{100 * float(np.mean(changes)):>+11.1f} %")
    print("  (aot vs dpot: relative change of l2 full; its mean is the average of the per-dataset changes)")


def plot_demo(results: dict[str, dict[str, tuple]], dataset: str, steps: Sequence[int], path: Path) -> Path:
    """Rows: ground truth, then prediction and |error| of each model, at rollout ``steps``."""
    plt = pyplot()
    per_model = {m: r for m, r in results[dataset].items() if m in MODELS}
    truth = next(iter(per_model.values()))[1][0][..., 0]
    steps = [s for s in steps if 1 <= s <= truth.shape[-1]]
    rows = [("ground truth", truth, "truth")]
    for m, (_, (_, pred)) in per_model.items():
        rows += [(f"{m}", pred[..., 0], "pred"), (f"{m} |error|", (pred[..., 0] - truth).abs(), "err")]
    fig, axes = plt.subplots(len(rows), len(steps), figsize=(2.6 * len(steps), 2.3 * len(rows)), squeeze=False)
    lo, hi = float(truth.min()), float(truth.max())
    err_hi = max(float(r[1].max()) for r in rows if r[2] == "err")
    for i, (label, field, kind) in enumerate(rows):
        for j, s in enumerate(steps):
            kw = dict(cmap="magma", vmin=0, vmax=err_hi) if kind == "err" else dict(cmap="RdBu_r", vmin=lo, vmax=hi)
            im = axes[i, j].imshow(field2d(field[..., s - 1]).T, origin="lower", **kw)
            axes[i, j].set_xticks([]), axes[i, j].set_yticks([])
            if i == 0:
                axes[i, j].set_title(f"step {s}", fontsize=10)
            if j == 0:
                axes[i, j].set_ylabel(label, fontsize=9)
        fig.colorbar(im, ax=axes[i, -1], fraction=0.046)
    fig.suptitle(f"{dataset}, held-out trajectory 0: rollout from 10 frames", fontsize=11)
    return save_figure(plt, fig, path)


def plot_curves(results: dict[str, dict[str, tuple]], ft: FinetuneResult | None, path: Path) -> Path:
    """Error versus rollout step: one panel per held-out dataset (+ the fine-tuning panel)."""
    plt = pyplot()
    panels = len(results) + (ft is not None)
    fig, axes = plt.subplots(1, panels, figsize=(3.6 * panels, 3.4), squeeze=False)
    styles = {"persistence": dict(color="0.5", ls="--"), "dpot-micro": dict(color="C0"), "aot-pot-micro": dict(color="C3")}
    for ax, (ds, per_model) in zip(axes[0], results.items()):
        for m, (r, _) in per_model.items():
            ax.plot(np.arange(1, len(r.per_step) + 1), r.per_step, marker=".", label=m, **styles.get(m, {}))
        ax.set_title(ds, fontsize=10)
    if ft is not None:
        ax = axes[0, -1]
        for label, r, st in (("aot-pot-micro zero-shot", ft.zero_shot, dict(color="C3", ls=":")),
                             ("aot-pot-micro fine-tuned", ft.finetuned, dict(color="C3")),
                             ("aot-pot-micro from scratch", ft.scratch, dict(color="C2"))):
            ax.plot(np.arange(1, len(r.per_step) + 1), r.per_step, marker=".", label=label, **st)
        ax.set_title(f"unseen: {UNSEEN[0]}", fontsize=10)
        ax.legend(fontsize=7)
    for ax in axes[0]:
        ax.set_yscale("log")
        ax.set_xlabel("rollout step")
        ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].set_ylabel("relative L2 error")
    axes[0, 0].legend(fontsize=7)
    return save_figure(plt, fig, path)


@dataclass
class DemoResult:
    """``l2_full[dataset][model]`` on the held-out data (models and ``persistence``), the fine-tuning
    comparison (None when skipped) with the persistence error on its test split, and the PNGs."""

    l2_full: dict[str, dict[str, float]]
    finetune: FinetuneResult | None
    finetune_persistence: float | None
    plots: tuple[Path, Path]


DEMO_FILES = ("data", "finetune", "demo.png", "error-vs-step.png")  # what a demo writes in its --out


def run_demo(out_dir: str | Path = "demo_out", finetune_steps: int = 300, n_test: int = 8, n_finetune: int = 40,
             finetune_lr: float = 1e-3, batch_size: int = 8, seed: int = 0) -> DemoResult:
    """The whole demo (see the module doc). ``finetune_steps=0`` skips the fine-tuning part."""
    out_dir = claim_output_dir(out_dir, lambda p: p.name in DEMO_FILES, what="the demo's data, runs and plots",
                               advice="choose another --out")
    torch.manual_seed(seed)
    print("opzoo demo: pretrained micro operators by name, offline")
    models: dict[str, nn.Module] = {}
    for name in MODELS:
        models[name] = load(name, pretrained=True).eval()
        n_params = sum(p.numel() for p in models[name].parameters())
        print(f"  opzoo.load({name!r}, pretrained=True): {n_params:,} parameters, "
              f"pretrained on {', '.join(models[name].pretrained_cfg.get('datasets', []))}")
    reference = models[MODELS[0]]
    c = reference.config
    frame_shape = FrameShape(tuple(reference.pretrained_cfg["resolution"]), c.in_channels, c.in_timesteps,
                             c.out_timesteps)

    print(f"\n1. held-out data: {n_test} new trajectories of each pretraining PDE (seed {HELD_OUT_SEED})")
    files = {name: make_data(spec, out_dir / "data" / f"{name}-heldout.h5", n_test, HELD_OUT_SEED)
             for name, spec in MICRO_SUITE.items()}
    results = evaluate_on(models, files, frame_shape)
    print_table(results)

    ft, persistence = None, None
    if finetune_steps > 0:
        name, spec = UNSEEN
        print(f"\n2. a PDE neither model saw: {name} (Navier-Stokes, viscosity 1e-5), {n_finetune} trajectories "
              f"(seed {UNSEEN_SEED}), the last 20 % held out")
        train_file = make_data(spec, out_dir / "data" / f"{name}.h5", n_finetune, UNSEEN_SEED)
        ft = finetune_unseen(train_file, out_dir / "finetune", finetune_steps, finetune_lr, batch_size, seed,
                             weights_digest(models["aot-pot-micro"]))
        test = split_trajectories(TrajectoryDataset(str(train_file)), FINETUNE_TEST_FRACTION)[1]  # the trainer's test split
        persistence = persistence_result(name, test, frame_shape)
        print(f"\nunseen {name}, l2 full on its held-out trajectories ({finetune_steps} steps, same budget and lr):")
        for label, r in (("persistence baseline", persistence), ("aot-pot-micro zero-shot", ft.zero_shot),
                         ("aot-pot-micro fine-tuned", ft.finetuned), ("aot-pot-micro from scratch", ft.scratch)):
            print(f"  {label:<28}{r.l2_full:>10.4f}")

    demo_png = plot_demo(results, "ns-nu1e-4", [1, 4, 7, 10], out_dir / "demo.png")
    curves_png = plot_curves(results, ft, out_dir / "error-vs-step.png")
    print(f"\nplots: {demo_png} (ground truth / prediction / error, both models)\n       {curves_png} (error vs step)")
    table = {ds: {m: r[0].l2_full for m, r in per.items()} for ds, per in results.items()}
    return DemoResult(table, ft, persistence.l2_full if persistence is not None else None, (demo_png, curves_png))



def add_command(subparsers) -> None:
    """``opzoo demo``, registered by opzoo-aot (it owns aot-pot-micro; opzoo-fourier, a dependency, dpot-micro)."""
    p = subparsers.add_parser("demo", help="pretrained micro operators by name: held-out errors vs persistence, "
                                           "fine-tuning on an unseen PDE, plots (offline, ~3 min on 2 CPU cores)")
    p.add_argument("--out", default="demo_out", help="where the data, runs and PNGs go")
    p.add_argument("--finetune-steps", type=int, default=300, help="fine-tuning budget (0 skips fine-tuning)")
    p.add_argument("--n-test", type=int, default=8, help="held-out trajectories per pretraining PDE")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    run_demo(out_dir=args.out, finetune_steps=args.finetune_steps, n_test=args.n_test)
    return 0

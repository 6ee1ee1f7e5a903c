"""FLeRM width transfer on an FNO-2d family (widths x1..x8), the paper's Figure 2 on opzoo.

1. Base (width ``w0``): learning-rate sweep with ``flerm`` in record mode (recording does not change
   training, so these are also the base's standard runs).
2. Each wider model (x2, x4, x8), at every lr of the sweep: standard (same lr for every tensor) and
   FLeRM-matched to the base record of that lr (``mode: match``, periodic every ``--every`` steps).
Data: opzoo's incompressible Navier–Stokes generator (vorticity, 32x32, ν = 1e-3), next-frame
prediction (T_in = 1), constant lr, AdamW, ``--seeds`` (every run once per seed; the FLeRM runs match
the mean of the base records of all seeds, as the paper does). Reports the mean training loss of the
last ``--tail`` steps and the one-step test l2 (``horizon: 1``) for every run, the optimal lr per width
(of the seed mean, and per seed), and a PNG (seed mean, min-max band), with the table as JSON and CSV,
in ``--out``. Every finished run is appended to
``WORK/results.jsonl`` and skipped when the script is run again with the same settings, so an
interrupted sweep resumes (and disjoint ``--mults``/``--lrs`` subsets can run in parallel).
Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_flerm_transfer.py [--steps 200] [--seeds 0 1 2] [--out docs/flerm]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from opzoo.training import Trainer, parse_run_config, read_log
from opzoo.training.trainer import TrainingDivergedError


def model_args(width: int, depth: int, modes: int) -> dict:
    return {"spatial_dims": 2, "width": width, "depth": depth, "modes": modes, "projection_dim": 2 * width,
            "in_channels": 1, "out_channels": 1, "in_timesteps": 1, "out_timesteps": 1}


def run(out: Path, data: Path, width: int, lr: float, args, hook: dict | None, seed: int = 0) -> dict:
    doc = {
        "output_dir": str(out), "seed": seed,
        "model": {"name": "fno", "args": model_args(width, args.depth, args.modes)},
        "data": {"datasets": [{"name": "ns", "path": str(data), "test_fraction": 0.125,
                               "generate": {"kind": "ns", "n": 48, "res": 32, "nu": 1.0e-3, "steps": 20}}],
                 "resolution": [32, 32], "max_test_trajectories": 6, "horizon": 1},
        "optimizer": {"lr": lr, "hooks": [hook] if hook else []},
        "schedule": {"name": "constant"},
        "training": {"steps": args.steps, "batch_size": args.batch, "eval_every": None, "log_every": 10},
        "checkpoint": {"every": None, "resume": False},
        "evaluation": {"plots": False},
    }
    t0 = time.perf_counter()
    try:
        result = Trainer(parse_run_config(doc), show_progress=False).fit()
        losses = result.losses
        l2 = result.evals[args.steps][0].l2_full
    except TrainingDivergedError:
        losses, l2 = [r["loss"] for r in read_log(out / "log.jsonl")], math.inf
    tail = losses[-args.tail:]
    final = sum(tail) / len(tail) if len(losses) == args.steps else math.inf
    return {"width": width, "lr": lr, "train_loss": final if math.isfinite(final) else None,
            "test_l2": l2 if math.isfinite(l2) else None, "seconds": round(time.perf_counter() - t0, 2)}


def seed_mean(results: list[dict], width: int, method: str, metric: str, base_width: int) -> list[tuple]:
    """``[(lr, mean, min, max)]`` over seeds, sorted by lr; an lr where any seed diverged is left out."""
    by_lr: dict[float, list] = {}
    for r in results:
        if r["width"] == width and (r["method"] == method or width == base_width):
            by_lr.setdefault(r["lr"], []).append(r[metric])
    return [(lr, sum(v) / len(v), min(v), max(v)) for lr, v in sorted(by_lr.items()) if None not in v]


def plot(results: list[dict], widths: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for row, metric in enumerate(("train_loss", "test_l2")):
        for col, method in enumerate(("standard", "flerm")):
            ax = axes[row, col]
            for w in widths:
                pts = seed_mean(results, w, method, metric, widths[0])
                if pts:
                    lrs, mean, lo, hi = zip(*pts)
                    line, = ax.plot(lrs, mean, marker="o", label=f"width {w} (x{w // widths[0]})")
                    ax.fill_between(lrs, lo, hi, color=line.get_color(), alpha=0.15)
                    best = min(pts, key=lambda p: p[1])
                    ax.plot(best[0], best[1], marker="*", ms=14, color=line.get_color())
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            label = {"train_loss": "train loss (last steps)", "test_l2": "one-step test l2"}[metric]
            ax.set_title(f"{'standard' if method == 'standard' else 'FLeRM'}: {label} (seed mean, band min-max)")
            ax.set_xlabel("base learning rate")
            ax.legend(fontsize=8)
    fig.suptitle("FNO-2d width transfer on Navier–Stokes 32², * = best lr per width")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--tail", type=int, default=20, help="training loss = mean of the last TAIL steps")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--modes", type=int, default=8)
    p.add_argument("--base-width", type=int, default=8)
    p.add_argument("--mults", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--lrs", type=float, nargs="+", default=[3e-4, 1e-3, 3e-3, 1e-2, 3e-2])
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--work", default="/tmp/opzoo-flerm-transfer")
    p.add_argument("--out", default="docs/flerm")
    args = p.parse_args()
    work, out = Path(args.work), Path(args.out)
    data = work / "ns32.h5"
    widths = [args.base_width * m for m in args.mults]
    settings = {k: getattr(args, k) for k in ("steps", "tail", "batch", "depth", "modes", "every")}
    cache = work / "results.jsonl"
    done = {}
    if cache.is_file():
        for line in cache.read_text().splitlines():
            r = json.loads(line)
            if r.get("settings") == settings:
                done[(r["width"], r["lr"], r["method"], r["seed"])] = r
    results = []
    jobs = [(widths[0], lr, "record", seed) for seed in args.seeds for lr in args.lrs]
    jobs += [(w, lr, method, seed) for seed in args.seeds for w in widths[1:] for lr in args.lrs
             for method in ("standard", "flerm")]
    for w, lr, method, seed in tqdm(jobs, desc="runs"):
        run_dir = work / f"w{w}-lr{lr:g}-{method}-s{seed}"
        if method == "record":
            hook = {"name": "flerm", "args": {"mode": "record", "every": args.every}}
        elif method == "flerm":
            hook = {"name": "flerm", "args": {"mode": "match", "every": args.every,
                                              "base": [str(work / f"w{widths[0]}-lr{lr:g}-record-s{s}") for s in args.seeds]}}
        else:
            hook = None
        if (w, lr, method, seed) in done:
            results.append(done[(w, lr, method, seed)])
            continue
        r = run(run_dir, data, w, lr, args, hook, seed)
        r.update(method=method, seed=seed, settings=settings)
        results.append(r)
        work.mkdir(parents=True, exist_ok=True)
        with cache.open("a") as f:
            f.write(json.dumps(r) + "\n")
        tqdm.write(json.dumps(r))
    summary = {"widths": widths, "lrs": args.lrs, "seeds": args.seeds, **settings, "torch": torch.__version__,
               "machine": f"{platform.machine()}, {torch.get_num_threads()} intra-op thread(s)",
               "results": results, "best": {}}
    for method in ("standard", "flerm"):
        for metric in ("train_loss", "test_l2"):
            best = {}
            for w in widths:
                pts = seed_mean(results, w, method, metric, widths[0])
                if pts:
                    b = min(pts, key=lambda p: p[1])
                    per_seed = []
                    for seed in args.seeds:
                        rs = [r for r in results if r["width"] == w and r["seed"] == seed and r[metric] is not None
                              and (r["method"] == method or w == widths[0])]
                        per_seed.append(min(rs, key=lambda r: r[metric])["lr"] if rs else None)
                    best[w] = {"lr": b[0], metric: b[1], "per_seed_lr": per_seed}
            summary["best"][f"{method}/{metric}"] = best
    out.mkdir(parents=True, exist_ok=True)
    (out / "width_transfer.json").write_text(json.dumps(summary, indent=1))
    rows = ["width,method,lr,seed,train_loss,test_l2_one_step,seconds"]
    rows += [f"{r['width']},{r['method']},{r['lr']:g},{r['seed']},"
             f"{r['train_loss'] if r['train_loss'] is not None else 'diverged'},"
             f"{r['test_l2'] if r['test_l2'] is not None else 'diverged'},{r['seconds']}"
             for r in sorted(results, key=lambda r: (r["width"], r["method"], r["lr"], r["seed"]))]
    (out / "width_transfer.csv").write_text("\n".join(rows) + "\n")
    plot(results, widths, out / "width_transfer.png")
    print(json.dumps(summary["best"], indent=1))


if __name__ == "__main__":
    main()

"""FLeRM width transfer on an FNO-2d family (widths x1..x8), the paper's Figure 2 on opzoo.

1. Base (width ``w0``): learning-rate sweep with ``flerm`` in record mode (recording does not change
   training, so these are also the base's standard runs).
2. Each wider model (x2, x4, x8), at every lr of the sweep: standard (same lr for every tensor) and
   FLeRM-matched to the base record of that lr (``mode: match``, periodic every ``--every`` steps).
Data: opzoo's incompressible Navier–Stokes generator (vorticity, 32x32, ν = 1e-3), next-frame
prediction (T_in = 1), constant lr, AdamW, one seed. Reports the mean training loss of the last
``--tail`` steps and the one-step test l2 (``horizon: 1``) for every run, the optimal lr per width,
and a PNG, with the table as JSON and CSV, in ``--out``. Every finished run is appended to
``WORK/results.jsonl`` and skipped when the script is run again with the same settings, so an
interrupted sweep resumes (and disjoint ``--mults``/``--lrs`` subsets can run in parallel).
Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_flerm_transfer.py [--steps 200] [--out docs/flerm]``.
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


def run(out: Path, data: Path, width: int, lr: float, args, hook: dict | None) -> dict:
    doc = {
        "output_dir": str(out), "seed": 0,
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


def plot(results: list[dict], widths: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for row, metric in enumerate(("train_loss", "test_l2")):
        for col, method in enumerate(("standard", "flerm")):
            ax = axes[row, col]
            for w in widths:
                rs = sorted((r for r in results if r["width"] == w and (r["method"] == method or w == widths[0])),
                            key=lambda r: r["lr"])
                pts = [(r["lr"], r[metric]) for r in rs if r[metric] is not None]
                if pts:
                    line, = ax.plot(*zip(*pts), marker="o", label=f"width {w} (x{w // widths[0]})")
                    best = min(pts, key=lambda p: p[1])
                    ax.plot(*best, marker="*", ms=14, color=line.get_color())
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            label = {"train_loss": "train loss (last steps)", "test_l2": "one-step test l2"}[metric]
            ax.set_title(f"{'standard' if method == 'standard' else 'FLeRM'}: {label}")
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
                done[(r["width"], r["lr"], r["method"])] = r
    results = []
    jobs = [(widths[0], lr, "record") for lr in args.lrs]
    jobs += [(w, lr, method) for w in widths[1:] for lr in args.lrs for method in ("standard", "flerm")]
    for w, lr, method in tqdm(jobs, desc="runs"):
        run_dir = work / f"w{w}-lr{lr:g}-{method}"
        if method == "record":
            hook = {"name": "flerm", "args": {"mode": "record", "every": args.every}}
        elif method == "flerm":
            hook = {"name": "flerm", "args": {"mode": "match", "every": args.every,
                                              "base": str(work / f"w{widths[0]}-lr{lr:g}-record")}}
        else:
            hook = None
        if (w, lr, method) in done:
            results.append(done[(w, lr, method)])
            continue
        r = run(run_dir, data, w, lr, args, hook)
        r.update(method=method, settings=settings)
        results.append(r)
        work.mkdir(parents=True, exist_ok=True)
        with cache.open("a") as f:
            f.write(json.dumps(r) + "\n")
        tqdm.write(json.dumps(r))
    summary = {"widths": widths, "lrs": args.lrs, **settings, "torch": torch.__version__,
               "machine": f"{platform.machine()}, {torch.get_num_threads()} intra-op thread(s)",
               "results": results, "best": {}}
    for method in ("standard", "flerm"):
        for metric in ("train_loss", "test_l2"):
            best = {}
            for w in widths:
                rs = [r for r in results if r["width"] == w and r[metric] is not None
                      and (r["method"] == method or w == widths[0])]
                if rs:
                    b = min(rs, key=lambda r: r[metric])
                    best[w] = {"lr": b["lr"], metric: b[metric]}
            summary["best"][f"{method}/{metric}"] = best
    out.mkdir(parents=True, exist_ok=True)
    (out / "width_transfer.json").write_text(json.dumps(summary, indent=1))
    rows = ["width,method,lr,train_loss,test_l2_one_step,seconds"]
    rows += [f"{r['width']},{r['method']},{r['lr']:g},{r['train_loss'] if r['train_loss'] is not None else 'diverged'},"
             f"{r['test_l2'] if r['test_l2'] is not None else 'diverged'},{r['seconds']}"
             for r in sorted(results, key=lambda r: (r["width"], r["method"], r["lr"]))]
    (out / "width_transfer.csv").write_text("\n".join(rows) + "\n")
    plot(results, widths, out / "width_transfer.png")
    print(json.dumps(summary["best"], indent=1))


if __name__ == "__main__":
    main()

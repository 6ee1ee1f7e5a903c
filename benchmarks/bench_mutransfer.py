"""``opzoo mutransfer`` on configs/mutransfer-burgers.yaml: does the best learning rate stay put across K under μP?

(The replication in docs/mup.md is benchmarks/bench_mup_replication.py; this config's smooth target barely uses K.)

Runs ``opzoo mutransfer`` on configs/mutransfer-burgers.yaml (FNO-1D, generated Burgers u0 -> u(., 1),
7 learning rates x K in {4, 8, 16, 32} x {standard, μP} x 2 seeds; resumable: a finished sweep only
re-reads its results and redraws the plot) and prints, as a markdown table, the best learning rate
per K under each parametrization (seed-mean test l2), how far it moves (max / min of the best lrs,
in decades and in grid steps), and the target's loss when the proxy's best lr is transferred.

    OMP_NUM_THREADS=1 python benchmarks/bench_mutransfer.py [--out DIR] [--device cuda] [--png landscape.png]
        [--lr 1e-3 3e-3 ...] [--seeds 0 1 2] [--landscape-modes 32]   # another grid on the same config
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import shutil
from pathlib import Path

import torch

from opzoo_mup.mutransfer import load_config, run_mutransfer

ROOT = Path(__file__).resolve().parents[1]
LABEL = {"standard": "standard", "mup": "μP"}


def grid_steps(lrs: list[float], grid: list[float]) -> int:
    """How many sweep-grid positions separate the largest and the smallest best lr."""
    index = sorted(grid).index
    return index(max(lrs)) - index(min(lrs))


def markdown_report(summary: dict, grid: list[float]) -> str:
    """The best lr per K of each parametrization, its spread, and the proxy -> target transfer."""
    params = list(summary["parametrizations"])
    ks = list(summary["parametrizations"][params[0]]["best_per_K"])
    head = "| K | " + " | ".join(f"{LABEL[p]}: best lr | {LABEL[p]}: test l2" for p in params) + " |"
    lines = [head, "|---" * (1 + 2 * len(params)) + "|"]
    for k in ks:
        cells = []
        for p in params:
            v = summary["parametrizations"][p]["best_per_K"][k]
            cells += [f"{v['best_lr']:.3g}", f"{v['loss']:.4f}"]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("")
    for p in params:
        entry = summary["parametrizations"][p]
        lrs = [v["best_lr"] for v in entry["best_per_K"].values()]
        t = entry["target"]
        lines.append(
            f"- {LABEL[p]}: best lr from {min(lrs):.3g} to {max(lrs):.3g} across K (x{max(lrs) / min(lrs):.2g}, "
            f"{math.log10(max(lrs) / min(lrs)):.1f} decades, {grid_steps(lrs, grid)} grid steps); the proxy's "
            f"(K={summary['proxy_modes']}) best lr {t['lr']:.3g} at the target K={summary['target_modes']}: test l2 "
            f"{t['loss']:.4f} vs the target's own best {t.get('best_possible_loss', float('nan')):.4f} "
            f"(regret x{t.get('regret', float('nan')):.3f})")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "mutransfer-burgers.yaml"))
    ap.add_argument("--out", default=None, help="output directory (default: the config's output_dir)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--png", default=None, help="also copy the loss-vs-lr plot here")
    ap.add_argument("--lr", type=float, nargs="+", default=None, help="replace the config's sweep.lr")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="replace the config's sweep.seeds")
    ap.add_argument("--landscape-modes", type=int, nargs="+", default=None,
                    help="replace the config's sweep.landscape_modes (the K swept at every lr besides the proxy)")
    args = ap.parse_args()
    cfg = load_config(args.config, output_dir=args.out, device=args.device)
    if args.lr:
        if any(not v > 0 for v in args.lr):
            ap.error(f"--lr: learning rates must be positive, got {args.lr}")
        cfg.sweep.lr = args.lr
    cfg.sweep.seeds = args.seeds or cfg.sweep.seeds
    if args.landscape_modes:
        if any(k < 2 for k in args.landscape_modes):
            ap.error(f"--landscape-modes: μP needs K >= 2, got {args.landscape_modes}")
        cfg.sweep.landscape_modes = args.landscape_modes
    summary = run_mutransfer(cfg, source="bench_mutransfer")
    print(f"\n{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); metric: {summary['metric']} l2 "
          f"(mean over seeds {cfg.sweep.seeds})\n")
    print(markdown_report(summary, [float(v) for v in cfg.sweep.lr]))
    png = Path(cfg.output_dir) / "lr_landscape.png"
    if args.png:
        shutil.copyfile(png, args.png)
        png = Path(args.png)
    print(f"\noutputs: {cfg.output_dir}/sweep.csv, transfer.json, {png}")


if __name__ == "__main__":
    main()

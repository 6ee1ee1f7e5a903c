"""μTransfer-FNO replication (docs/mup.md): does the best learning rate stay put across K under μP?

Runs ``opzoo mutransfer`` on configs/mutransfer-burgers.yaml (FNO-1D, generated Burgers u0 -> u(., 1),
7 learning rates x K in {4, 8, 16, 32} x {standard, μP} x 2 seeds; resumable) and prints, for each
parametrization, the best learning rate per K (seed-mean test l2), how far it moves (max/min ratio
of the best lrs, in decades), and the loss at the target when the proxy's best lr is transferred.

    OMP_NUM_THREADS=1 python benchmarks/bench_mutransfer.py [--out runs/mutransfer-burgers]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from opzoo_mup.mutransfer import load_config, run_mutransfer

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "configs" / "mutransfer-burgers.yaml"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    cfg = load_config(args.config, output_dir=args.out, device=args.device)
    summary = run_mutransfer(cfg, source="bench_mutransfer")
    print(f"\nproxy K={summary['proxy_modes']}, target K={summary['target_modes']}, metric: {summary['metric']} l2")
    for p, entry in summary["parametrizations"].items():
        per_k = entry["best_per_K"]
        lrs = [v["best_lr"] for v in per_k.values()]
        spread = math.log10(max(lrs) / min(lrs))
        print(f"{p:9s} best lr per K: " + "  ".join(f"K={k}: {v['best_lr']:.0e} ({v['loss']:.4f})" for k, v in per_k.items()))
        t = entry["target"]
        print(f"{'':9s} best-lr spread across K: x{max(lrs) / min(lrs):.0f} ({spread:.1f} decades); "
              f"transferred proxy lr {t['lr']:.0e} -> target loss {t['loss']:.4f}, "
              f"target's own best {t.get('best_possible_loss', float('nan')):.4f} (regret x{t.get('regret', float('nan')):.3f})")
    print(f"outputs: {cfg.output_dir}/sweep.csv, lr_landscape.png, transfer.json")


if __name__ == "__main__":
    main()

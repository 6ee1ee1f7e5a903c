"""FLeRM's cost: training with the ``flerm`` hook (one estimate every ``--every`` updates) versus without,
measured side by side in one process.

Four ``Trainer`` runs per round on an FNO-2d (Navier–Stokes 32², batch 8, AdamW, constant lr), timed in
process CPU time (``time.process_time``; the machine is shared, so CPU time is steadier than wall time):

- ``plain(N+1)`` and ``flerm(N+1)``: N + 1 updates without / with ``flerm`` (record mode);
- ``plain(1)`` and ``flerm(1)``: one update, the same setup and final evaluation.

Differences cancel the setup and the evaluation: ``flerm(N+1) − flerm(1)`` is the cost of updates
2 … N + 1, which contain N / every periodic estimates (one fresh-batch forward/backward each), and
``plain(N+1) − plain(1)`` the same updates without them; their ratio is the steady-state cost of
measuring. ``flerm(1) − plain(1)`` is the one-off warm-up (``warmup`` estimates after update 1),
reported in units of a plain update. Rounds alternate the order (ABAB, then BABA) so drifting
machine load hits both alike; medians over rounds. Results go to ``--out`` as JSON.
Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_flerm_overhead.py [--steps 300] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from opzoo.training import Trainer, parse_run_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_flerm_transfer import model_args  # noqa: E402


def run_config(out: Path, data: Path, args, updates: int, hook: bool) -> dict:
    return {
        "output_dir": str(out), "seed": 0,
        "model": {"name": "fno", "args": model_args(args.width, 3, 8)},
        "data": {"datasets": [{"name": "ns", "path": str(data), "test_fraction": 0.125,
                               "generate": {"kind": "ns", "n": 48, "res": 32, "nu": 1.0e-3, "steps": 20}}],
                 "resolution": [32, 32], "max_test_trajectories": 1, "horizon": 1},
        "optimizer": {"lr": 1e-3, "hooks": [{"name": "flerm", "args": {"mode": "record", "every": args.every,
                                                                       "warmup": args.warmup}}] if hook else []},
        "schedule": {"name": "constant"},
        "training": {"steps": updates, "batch_size": 8, "eval_every": None, "log_every": 100},
        "checkpoint": {"every": None, "resume": False},
        "evaluation": {"plots": False},
    }


def timed(out: Path, data: Path, args, updates: int, hook: bool) -> tuple[float, float]:
    """(process CPU seconds, wall seconds) of building and fitting one run."""
    cfg = parse_run_config(run_config(out, data, args, updates, hook))
    c0, t0 = time.process_time(), time.perf_counter()
    Trainer(cfg, show_progress=False).fit()
    return time.process_time() - c0, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="N: timed updates after the first")
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--work", default="/tmp/opzoo-flerm-overhead")
    p.add_argument("--out", default=None, help="JSON file for the results (default: WORK/overhead.json)")
    args = p.parse_args()
    if args.steps % args.every:
        p.error("--steps must be a multiple of --every (so the timed updates hold whole measurement periods)")
    work = Path(args.work)
    shared = Path("/tmp/opzoo-flerm-transfer/ns32.h5")  # bench_flerm_transfer.py's data, if generated
    data = shared if shared.is_file() else work / "ns32.h5"
    timed(work / "generate", data, args, 1, False)  # generates the data once (untimed)
    runs = {("plain", args.steps + 1): False, ("flerm", args.steps + 1): True, ("plain", 1): False, ("flerm", 1): True}
    cpu = {k: [] for k in runs}
    wall = {k: [] for k in runs}
    for r in tqdm(range(args.rounds), desc="rounds"):
        keys = list(runs)
        order = keys if r % 2 == 0 else [keys[1], keys[0], keys[3], keys[2]]
        for key in order:
            c, w = timed(work / f"{key[0]}-{key[1]}", data, args, key[1], runs[key])
            cpu[key].append(c)
            wall[key].append(w)
    n = args.steps + 1

    def summary(t: dict) -> dict:
        steady = [(fb - f1) / (pb - p1) for fb, f1, pb, p1 in zip(t[("flerm", n)], t[("flerm", 1)],
                                                                   t[("plain", n)], t[("plain", 1)])]
        per_update = [(pb - p1) / args.steps for pb, p1 in zip(t[("plain", n)], t[("plain", 1)])]
        warm = [(f1 - p1) / u for f1, p1, u in zip(t[("flerm", 1)], t[("plain", 1)], per_update)]
        return {"steady_ratio_median": statistics.median(steady), "steady_ratios": steady,
                "plain_update_s_median": statistics.median(per_update),
                "warmup_in_updates_median": statistics.median(warm), "warmup_in_updates": warm,
                "runs_s": {f"{k[0]}({k[1]})": v for k, v in t.items()}}

    out = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
           "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
           "threads": torch.get_num_threads(), "width": args.width, "steps": args.steps, "every": args.every,
           "warmup": args.warmup, "rounds": args.rounds, "cpu": summary(cpu), "wall": summary(wall)}
    path = Path(args.out) if args.out else work / "overhead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    c = out["cpu"]
    print(f"steady-state cost of measuring every {args.every} updates: x{c['steady_ratio_median']:.4f} "
          f"(CPU time, median of {args.rounds}; wall x{out['wall']['steady_ratio_median']:.4f}); "
          f"one-off warm-up ({args.warmup} estimates) = {c['warmup_in_updates_median']:.1f} plain updates")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

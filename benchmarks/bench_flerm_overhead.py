"""FLeRM's cost: the CPU time of every update of one training run with the ``flerm`` hook, the updates that
measure (one estimate every ``--every`` updates) against the ones around them.

One ``Trainer`` run on an FNO-2d (Navier–Stokes 32², batch 8, AdamW, constant lr) with two hooks:
``flerm`` (record mode) and, after it, a timer that reads the process CPU time (``time.process_time``;
the machine is shared, so CPU time is steadier than wall time) before and after each optimizer
step. The cost of update ``i`` is the CPU time from the end of update ``i − 1`` to the end of update
``i`` (forward, backward, optimizer step, the hook's work). A measuring update's extra cost is its
cost minus the median cost of the ``--window`` plain updates on each side, so drifting machine load
cancels; the ratio is ``total / (total − Σ extra)`` over updates 2 … N (measurements at
``i % every == 0``). The one-off warm-up (``warmup`` estimates after update 1) is reported
separately, in plain updates. Results go to ``--out`` as JSON.
Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_flerm_overhead.py [--steps 1000] [--every 100]``.
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

import opzoo
from opzoo.training import OptimizerHook, Trainer, parse_run_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_flerm_transfer import model_args  # noqa: E402


class StepTimer(OptimizerHook):
    """Process CPU time at ``before_optimizer_step`` and ``after_optimizer_step`` of every update."""

    marks: list[tuple[int, float, float]] = []  # (update index, before, after)

    def before_optimizer_step(self, ctx) -> None:
        self._before = time.process_time()

    def after_optimizer_step(self, ctx) -> None:
        StepTimer.marks.append((ctx.step, self._before, time.process_time()))


def run_config(out: Path, data: Path, args) -> dict:
    return {
        "output_dir": str(out), "seed": 0,
        "model": {"name": "fno", "args": model_args(args.width, 3, 8)},
        "data": {"datasets": [{"name": "ns", "path": str(data), "test_fraction": 0.125,
                               "generate": {"kind": "ns", "n": 48, "res": 32, "nu": 1.0e-3, "steps": 20}}],
                 "resolution": [32, 32], "max_test_trajectories": 1, "horizon": 1},
        "optimizer": {"lr": 1e-3, "hooks": [
            {"name": "flerm", "args": {"mode": "record", "every": args.every, "warmup": args.warmup}},
            {"name": "bench-step-timer"}]},
        "schedule": {"name": "constant"},
        "training": {"steps": args.steps + 1, "batch_size": 8, "eval_every": None, "log_every": 100},
        "checkpoint": {"every": None, "resume": False},
        "evaluation": {"plots": False},
    }


def overhead(marks: list[tuple[int, float, float]], every: int, window: int) -> dict:
    """The extra CPU time of the measuring updates, from the timer's marks."""
    ends = {i: after for i, _, after in marks}
    cost = {i: ends[i] - ends[i - 1] for i in ends if i - 1 in ends}  # updates 2 … N + 1 (index 1 … N)
    measuring = [i for i in cost if i % every == 0]
    extra = {}
    for i in measuring:
        around = [cost[j] for j in range(i - window, i + window + 1) if j in cost and j % every]
        extra[i] = cost[i] - statistics.median(around)
    total = sum(cost.values())
    plain = [c for i, c in cost.items() if i % every]
    first = marks[0]
    in_step = statistics.median(after - before for i, before, after in marks[1:] if i % every)
    return {"updates": len(cost), "measurements": len(measuring), "total_cpu_s": total,
            "ratio": total / (total - sum(extra.values())),
            "plain_update_cpu_s_median": statistics.median(plain),
            "measurement_extra_in_updates": {i: e / statistics.median(plain) for i, e in extra.items()},
            "warmup_in_updates": ((first[2] - first[1]) - in_step) / statistics.median(plain)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000, help="N: timed updates after the first")
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--window", type=int, default=10, help="plain updates on each side of a measuring one")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--work", default="/tmp/opzoo-flerm-overhead")
    p.add_argument("--out", default=None, help="JSON file for the results (default: WORK/overhead.json)")
    args = p.parse_args()
    work = Path(args.work)
    shared = Path("/tmp/opzoo-flerm-transfer/ns32.h5")  # bench_flerm_transfer.py's data, if generated
    data = shared if shared.is_file() else work / "ns32.h5"
    registry = opzoo.get_registry()
    with registry.owned_by("bench_flerm_overhead"):
        registry.register_optimizer_hook("bench-step-timer", StepTimer)
    StepTimer.marks.clear()
    Trainer(parse_run_config(run_config(work / "run", data, args)), show_progress=True).fit()
    result = overhead(StepTimer.marks, args.every, args.window)
    out = {"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__, "machine": platform.machine(),
           "threads": torch.get_num_threads(), "width": args.width, "steps": args.steps, "every": args.every,
           "warmup": args.warmup, "window": args.window, **result}
    path = Path(args.out) if args.out else work / "overhead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    extras = list(result["measurement_extra_in_updates"].values())
    print(f"measuring every {args.every} updates: training CPU time x{result['ratio']:.4f} "
          f"({result['measurements']} measurements in {result['updates']} updates; one measurement = "
          f"{statistics.median(extras):.2f} plain updates, median); one-off warm-up ({args.warmup} estimates) "
          f"= {result['warmup_in_updates']:.1f} plain updates")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

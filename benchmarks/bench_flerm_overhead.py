"""FLeRM's cost: training with the ``flerm`` hook (one estimate every ``--every`` updates) versus without,
measured side by side in one run.

A: ``Trainer`` on an FNO-2d (Navier–Stokes 32², batch 8) without hooks. B: the same run with
``flerm`` in record mode. A and B alternate (A B A B ...) so drifting machine load hits both alike; one
intra-op thread. The steady-state cost is the wall time of updates 2..N from ``log.jsonl`` (so the
one-off warm-up after update 1 is excluded and reported separately, in units of a median step).
Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_flerm_overhead.py [--steps 400] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from opzoo.training import Trainer, parse_run_config, read_log

from bench_flerm_transfer import model_args


def timed_run(out: Path, data: Path, args, hook: bool) -> tuple[float, float]:
    doc = {
        "output_dir": str(out), "seed": 0,
        "model": {"name": "fno", "args": model_args(args.width, 3, 8)},
        "data": {"datasets": [{"name": "ns", "path": str(data), "test_fraction": 0.125,
                               "generate": {"kind": "ns", "n": 48, "res": 32, "nu": 1.0e-3, "steps": 20}}],
                 "resolution": [32, 32], "max_test_trajectories": 1, "horizon": 1},
        "optimizer": {"lr": 1e-3, "hooks": [{"name": "flerm", "args": {"mode": "record", "every": args.every}}]
                      if hook else []},
        "schedule": {"name": "constant"},
        "training": {"steps": args.steps + 1, "batch_size": 8, "eval_every": None, "log_every": 100},
        "checkpoint": {"every": None, "resume": False},
        "evaluation": {"plots": False},
    }
    Trainer(parse_run_config(doc), show_progress=False).fit()
    t = {r["step"]: r["time"] for r in read_log(out / "log.jsonl")}
    return t[args.steps + 1] - t[1], t[1]  # updates 2..N+1 (N updates), and update 1 (+ warm-up)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--work", default="/tmp/opzoo-flerm-overhead")
    args = p.parse_args()
    work = Path(args.work)
    data = Path("/tmp/opzoo-flerm-transfer/ns32.h5")
    data = data if data.is_file() else work / "ns32.h5"
    plain, flerm, first_plain, first_flerm = [], [], [], []
    for r in range(args.rounds):
        a, a1 = timed_run(work / f"plain-{r}", data, args, hook=False)
        b, b1 = timed_run(work / f"flerm-{r}", data, args, hook=True)
        plain.append(a), flerm.append(b), first_plain.append(a1), first_flerm.append(b1)
        print(f"round {r}: plain {a:.2f} s, flerm {b:.2f} s, ratio {b / a:.4f}")
    ratios = [b / a for a, b in zip(plain, flerm)]
    step = statistics.median(plain) / args.steps
    out = {"steps": args.steps, "every": args.every, "width": args.width,
           "plain_s": statistics.median(plain), "flerm_s": statistics.median(flerm),
           "ratio_median": statistics.median(ratios), "ratios": ratios,
           "warmup_in_steps": (statistics.median(first_flerm) - statistics.median(first_plain)) / step}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

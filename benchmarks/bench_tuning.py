"""Full, head and LoRA fine-tunes of two families on one file (issue 69; docs/training.md, "What a fine-tune trains"):
the test error (relative L2 over the whole rollout), the trainable parameters, the measured peak of a step (the run's
memory.json) and the seconds per step. Writes benchmarks/results/tuning.csv and .md.

    .venv/bin/python benchmarks/bench_tuning.py [--steps 60] [--models dpot-micro poseidon-micro]
"""

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opzoo.training import Trainer, finetune_config  # noqa: E402
from tests.training.conftest import heat_trajectories, write_canonical  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--models", nargs="+", default=["dpot-micro", "poseidon-micro"])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_canonical(Path(tmp) / "heat.h5", heat_trajectories(24, 32, 16, seed=0).astype(np.float32),
                               ["u"], "heat")
        for model in args.models:
            for tune in ("full", "head", "lora:8"):
                out = Path(tmp) / f"{model}-{tune.replace(':', '')}"
                cfg = finetune_config(model, [str(data)], str(out), steps=args.steps, batch_size=8, tune=tune,
                                      seed=0)
                trainer = Trainer(cfg, show_progress=False)
                t0 = time.perf_counter()
                result = trainer.fit()
                seconds = time.perf_counter() - t0
                memory = json.loads((out / "memory.json").read_text())
                final = result.evals[max(result.evals)][0]
                zero = result.evals[0][0]
                rows.append({"model": model, "tune": tune, "trainable": trainer.tuning.trainable,
                             "parameters": trainer.tuning.total, "zero_shot_l2": round(zero.l2_full, 4),
                             "l2_full": round(final.l2_full, 4),
                             "peak_mib_measured": round(memory["measured_peak"] / 2**20, 2),
                             "peak_mib_estimated": round(memory["estimate"]["total"] / 2**20, 2),
                             "seconds_per_step": round(seconds / args.steps, 4)})
                print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "tuning.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| model | tune | trainable / parameters | test l2 (zero-shot -> tuned) | peak MiB measured (estimated) | "
             "s/step (incl. evaluations) |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['tune']} | {r['trainable']:,} / {r['parameters']:,} | {r['zero_shot_l2']} -> "
              f"{r['l2_full']} | {r['peak_mib_measured']} ({r['peak_mib_estimated']}) | {r['seconds_per_step']} |"
              for r in rows]
    (RESULTS / "tuning.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""`opzoo compare`'s overhead over the same fine-tunes run by hand (issue 58: under 5 %).

The same cells (dpot-micro from its weights and the fno-2d baseline from scratch, N = 2 and 4, on a generated
diffusion-reaction file) are trained twice: once by hand, as `opzoo finetune MODEL --data FILE --steps S --batch-size
B --set seed=K` runs each (its run config, `finetune_config`, with the cell's training trajectories, through
`Trainer(cfg).fit()`: it evaluates its test split five times and at the end), and once by `compare()` (whose runs
evaluate at step 0 and the end, and which adds scoring every cell on the test frames, persistence, the costs, the
report and its pictures). Prints both wall-clock times and their ratio, alternating (by hand, then compare, then
again), the medians of the repeats.

    OMP_NUM_THREADS=1 python benchmarks/bench_compare_overhead.py [--steps 100] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from opzoo.benchmark.compare import CompareOptions, compare, plan_cells
    from opzoo.data.generators import generate
    from opzoo.training.finetune import finetune_config
    from opzoo.training.trainer import Trainer

    root = Path(tempfile.mkdtemp(prefix="opzoo-compare-bench-"))
    data = root / "dr.h5"
    generate("diffusion-reaction", data, 12, seed=5, progress=False, res=32, steps=16)
    options = CompareOptions(trajectories=(2, 4), steps=args.steps, batch_size=4, test_fraction=0.25, scratch=False)
    by_hand, by_compare = [], []
    for k in range(args.repeats):
        began = time.perf_counter()
        for cell in plan_cells(["dpot-micro"], "fno-2d", options):
            cfg = finetune_config(cell.model, [str(data)], str(root / f"hand{k}" / cell.key), steps=options.steps,
                                  batch_size=options.batch_size, test_fraction=options.test_fraction,
                                  pretrained=cell.start == "pretrained", overrides={"seed": cell.seed})
            for d in cfg.data.datasets:
                d.train_trajectories = cell.trajectories
            Trainer(cfg, show_progress=False).fit()
        by_hand.append(time.perf_counter() - began)
        began = time.perf_counter()
        compare(["dpot-micro"], [str(data)], root / f"compare{k}", options, say=lambda line: None)
        by_compare.append(time.perf_counter() - began)
    hand, comp = statistics.median(by_hand), statistics.median(by_compare)
    print(f"{len(plan_cells(['dpot-micro'], 'fno-2d', options))} cells of {args.steps} steps: by hand {hand:.1f} s, "
          f"compare {comp:.1f} s: overhead {100 * (comp / hand - 1):+.1f} % (median of {args.repeats})")


if __name__ == "__main__":
    main()

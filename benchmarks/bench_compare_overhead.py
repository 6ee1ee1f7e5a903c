"""`opzoo compare`'s overhead over the same fine-tunes run by hand (issue 58: under 5 %).

The same cells (dpot-micro from its weights and the fno-2d baseline from scratch, N = 2 and 4, on a generated
diffusion-reaction file) are trained twice: once by hand, each cell's own run config (`cell_config`: what its
`opzoo finetune` command asks for, validation selection included) through `Trainer(cfg).fit()`, and once by
`compare()` (which adds checking the plan, scoring every cell on the test frames, persistence, the costs, the report
and its pictures). Prints both wall-clock times and their ratio, alternating (by hand, then compare, then again), the
medians of the repeats.

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
    from opzoo.benchmark.compare_cells import cell_config
    from opzoo.data.generators import generate
    from opzoo.training.trainer import Trainer

    root = Path(tempfile.mkdtemp(prefix="opzoo-compare-bench-"))
    data = root / "dr.h5"
    generate("diffusion-reaction", data, 12, seed=5, progress=False, res=32, steps=16)
    options = CompareOptions(trajectories=(2, 4), steps=args.steps, batch_size=4, test_fraction=0.25, scratch=False)
    by_hand, by_compare = [], []
    for k in range(args.repeats):
        began = time.perf_counter()
        for cell in plan_cells(["dpot-micro"], "fno-2d", options):  # each cell's own run config, trained as is
            Trainer(cell_config(cell, [str(data)], root / f"hand{k}", options), show_progress=False).fit()
        by_hand.append(time.perf_counter() - began)
        began = time.perf_counter()
        compare(["dpot-micro"], [str(data)], root / f"compare{k}", options, say=lambda line: None)
        by_compare.append(time.perf_counter() - began)
    hand, comp = statistics.median(by_hand), statistics.median(by_compare)
    print(f"{len(plan_cells(['dpot-micro'], 'fno-2d', options))} cells of {args.steps} steps: by hand {hand:.1f} s, "
          f"compare {comp:.1f} s: overhead {100 * (comp / hand - 1):+.1f} % (median of {args.repeats})")


if __name__ == "__main__":
    main()

"""Fine-tuning recipes on a PDE the micro models never saw (issue 37): plain, layer-wise lr decay, and weight
decay with and without the no-decay groups (biases, norms, gates, position embeddings).

aot-pot-micro (its shipped weights) fine-tuned on Navier-Stokes at viscosity 1e-5 (`opzoo demo`'s unseen PDE:
40 trajectories, 32x32, the last 20 % held out), with `opzoo finetune`'s recipe (AdamW, one-cycle, lr 1e-3 from
the preset, batch 8) and each variant changing only its optimizer keys; l2 full of the rollout on the held-out
trajectories after ``--steps``, for ``--seeds`` seeds. Usage:
``python benchmarks/bench_finetune_recipes.py [--steps 200] [--seeds 0 1] [--out runs/finetune-recipes]``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from opzoo.training import Trainer, finetune_config, generate_dataset

UNSEEN = {"kind": "ns", "res": 32, "nu": 1.0e-5, "steps": 20, "record_dt": 0.5, "n": 40, "seed": 2000}
RECIPES = {
    "plain (wd 1e-6, everything decays)": {"optimizer.filter_bias_and_norm": False},
    "layer decay 0.75": {"optimizer.filter_bias_and_norm": False, "optimizer.layer_decay": 0.75},
    "wd 0.05, everything decays": {"optimizer.weight_decay": 0.05, "optimizer.filter_bias_and_norm": False},
    "wd 0.05, no-decay groups": {"optimizer.weight_decay": 0.05, "optimizer.filter_bias_and_norm": True},
    "wd 1e-6, no-decay groups": {"optimizer.filter_bias_and_norm": True},
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--out", default="runs/finetune-recipes")
    args = p.parse_args(argv)
    out = Path(args.out)
    data = out / "ns-nu1e-5.h5"
    if not data.is_file():
        generate_dataset(UNSEEN, data)
    rows = {}
    for label, keys in RECIPES.items():
        scores = []
        for seed in args.seeds:
            run = out / f"{list(RECIPES).index(label)}-seed{seed}"
            cfg = finetune_config("aot-pot-micro", [str(data)], str(run), steps=args.steps, batch_size=8,
                                  test_fraction=0.2, pretrained=True,
                                  overrides={"seed": seed, "evaluation.plots": False, **keys})
            result = Trainer(cfg, show_progress=False).fit()
            final = result.evals[args.steps][0] if result.evals else None
            scores.append(final.l2_full if final is not None else float("nan"))
        rows[label] = scores
        print(f"| {label} | {' | '.join(f'{s:.4f}' for s in scores)} | {statistics.mean(scores):.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

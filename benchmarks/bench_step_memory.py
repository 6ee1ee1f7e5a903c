"""The one estimator of a training step's peak (opzoo.training.memory) against the peak measured while two steps run
(issue 69; docs/benchmarks.md, "Memory of a training step"): every micro preset, and every family's largest preset at
its smallest grid (batch 1), each in a process of its own. A preset whose full fine-tune does not fit half of this
machine's memory is measured with --tune lora (the rest frozen), and says so. Writes benchmarks/results/step_memory.md.

    .venv/bin/python benchmarks/bench_step_memory.py [--largest] [--micro]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
LARGEST = ["dpot-h", "aot-pot-l", "nestor-s", "fno-3d", "gphyt-xl", "poseidon-l", "pdet-mc-l", "pdet-sc-l", "morph-l",
           "mpp-avit-l", "well-fno-post_neutron_star_merger", "well-tfno-post_neutron_star_merger",
           "well-unet-classic-MHD_64", "well-unet-convnext-MHD_64"]
ONE = r"""
import json, sys, torch, opzoo
from opzoo.model_io.example_input import input_grid
from opzoo.training.memory import estimate_step_memory, measured_step_peak
from opzoo.training.memory_plan import meta_copy
from opzoo.training.tuning import apply_tuning, parse_tune
from opzoo.model_io.size_check import available_memory
from opzoo.evaluation.fit import neutral_statistics
name, batch, smallest = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
base = neutral_statistics(name, {}) or {}  # a model normalized by its data's statistics: mean 0, std 1 (random data)
with torch.device("meta"):
    meta = opzoo.load(name, **base)
grid, _ = input_grid(meta, None)
if smallest:  # two steps of the grid it takes on every axis, at least 16 (an FNO's modes), at most its own
    from opzoo.model_io.example_input import grid_step
    grid = [min(g, max(2 * grid_step(meta), 16)) for g in grid]
c = meta.config
shape = (batch, *grid, c.in_timesteps, c.in_channels)
params = sum(p.numel() for p in meta.parameters())
tune = "full" if params * 4 * 5 < available_memory() / 2 else "lora"
apply_tuning(meta, parse_tune(tune))
kw = {**base, **({"img_size": list(grid)} if hasattr(c, "img_size") and list(grid) != list(getattr(c, "img_size") or [])
                  else {})}
if kw:
    with torch.device("meta"):
        meta = opzoo.load(name, **kw)
    apply_tuning(meta, parse_tune(tune))
torch.manual_seed(0)
model = opzoo.load(name, **kw)
apply_tuning(model, parse_tune(tune))
on = "meta"
try:
    estimate = estimate_step_memory(meta, shape).total
except RuntimeError:  # a forward that reads values (.item()): the estimator on the real model instead
    estimate, on = estimate_step_memory(model, shape).total, "real tensors"
from opzoo.contracts.routing import Router
routed = any(isinstance(m, Router) for m in model.modules())
# with routers, AdamW holds state for the experts chosen so far: measured as a long run holds it, for every expert
measured = measured_step_peak(model, shape, steady=routed)
print(json.dumps({"model": name, "grid": "x".join(map(str, grid)), "batch": batch, "tune": tune, "parameters": params,
                  "estimated_mib": estimate / 2**20, "measured_mib": measured / 2**20, "estimated_on": on,
                  "steady": routed}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--largest", action="store_true")
    parser.add_argument("--micro", action="store_true")
    parser.add_argument("--only", nargs="*", help="these presets only (kept rows of the others are rewritten)")
    args = parser.parse_args()
    import opzoo

    names = ([(n, 2, "0") for n in sorted(m for m in opzoo.list_models() if m.endswith("-micro"))] if args.micro
             or not args.largest else []) + ([(n, 1, "1") for n in LARGEST] if args.largest or not args.micro else [])
    if args.only:
        names = [n for n in names if n[0] in args.only]
    rows = []
    for name, batch, smallest in names:
        result = subprocess.run([sys.executable, "-c", ONE, name, str(batch), smallest], capture_output=True, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=1800)
        if result.returncode:
            rows.append({"model": name, "error": (result.stderr.strip().splitlines() or ["?"])[-1][:200]})
        else:
            rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    lines = ["| model | parameters | grid | batch | trained | estimated MiB | measured MiB | estimated / measured |",
             "|---|---|---|---|---|---|---|---|"]
    old = RESULTS / "step_memory.json"
    kept = {r["model"]: r for r in (json.loads(old.read_text()) if old.exists() else [])}
    kept.update({r["model"]: r for r in rows})
    rows = [kept[n] for n in sorted(kept, key=lambda n: (not n.endswith("-micro"), n))]
    old.write_text(json.dumps(rows, indent=1))
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | | | | | | | not measured: {r['error']} |")
        else:
            lines.append(f"| {r['model']} | {r['parameters']:,} | {r['grid']} | {r['batch']} | {r['tune']} | "
                         f"{r['estimated_mib']:.1f} | {r['measured_mib']:.1f} | "
                         f"{r['estimated_mib'] / r['measured_mib']:.3f}"
                         + (" (estimated on real tensors: its forward reads values)"
                            if r.get("estimated_on") == "real tensors" else "")
                         + (" (measured with AdamW's state for every expert, as a long run holds it)"
                            if r.get("steady") else "") + " |")
    (RESULTS / "step_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

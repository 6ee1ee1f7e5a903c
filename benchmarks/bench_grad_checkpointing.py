"""Activation memory saved by gradient checkpointing (issue 37), measured on CPU.

Each measurement runs in its own process: build the preset at its pretrained shape (random weights), make a
batch, then one forward + backward of the training loss. The process's peak resident memory (``ru_maxrss``)
before the forward and after the backward differ by what the step needed on top of weights and input:
activations kept for backward, gradients (reported apart: one float per parameter) and the allocator's slack.
With checkpointing on, the blocks' activations are recomputed in backward instead of kept; the embedding's and
the head's are kept either way. "activations saved" is the drop in step memory over the step memory without the
gradients. Each configuration runs ``--rounds`` times in fresh
processes, alternating, and the median is reported with the time of the step.
Usage: ``python benchmarks/bench_grad_checkpointing.py [--presets dpot-s nestor-ti] [--batch 4] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, torch, opzoo
torch.set_num_threads(1)
name, batch, on = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
torch.manual_seed(0)
model = opzoo.load(name).train()
c = model.config
x = torch.randn(batch, *c.img_size, c.in_timesteps, c.in_channels)
y = torch.randn(batch, *c.img_size, c.out_timesteps, c.out_channels)
model.set_grad_checkpointing(on)
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)
before = rss()
t0 = time.perf_counter()
loss = torch.nn.functional.mse_loss(model(x), y) + (model.aux_loss() if hasattr(model, "aux_loss") else 0)
loss.backward()
seconds = time.perf_counter() - t0
grads = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
print(json.dumps({"before": before, "after": rss(), "seconds": seconds, "loss": float(loss), "grads": grads}))
"""


def measure(name: str, batch: int, on: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(batch), "1" if on else "0"], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--presets", nargs="+", default=["dpot-s", "nestor-ti"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    print("| preset | batch | step memory, off (MiB) | step memory, on (MiB) | of which gradients (MiB) | activations "
          "saved | step time off / on (s) | loss equal |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.presets:
        runs = {False: [], True: []}
        for _ in range(args.rounds):
            for on in (False, True):
                runs[on].append(measure(name, args.batch, on))
        mem = {on: statistics.median(r["after"] - r["before"] for r in runs[on]) for on in runs}
        sec = {on: statistics.median(r["seconds"] for r in runs[on]) for on in runs}
        same = len({r["loss"] for r in runs[False] + runs[True]}) == 1
        grads = runs[False][0]["grads"]
        saved = (mem[False] - mem[True]) / max(mem[False] - grads, 1e-9)
        print(f"| {name} | {args.batch} | {mem[False]:.0f} | {mem[True]:.0f} | {grads:.0f} | {saved:.0%} | "
              f"{sec[False]:.2f} / {sec[True]:.2f} | {same} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does FLeRM's periodic estimate track the current update? Estimators vs a finite-difference truth (docs/flerm.md).

A tanh MLP 8-64-64-8 (float64) fits a fixed random teacher MLP with Adam (lr 1e-2, betas (0.9, 0.999),
batch 32) for 301 updates. After update 1 and every 50th update (steps 1, 51, …, 301) each estimator
variant measures every tensor's function-space lr of the lr = 1 update, from probes on fresh batches
(32 inputs, ``φ = Σ ω f / sqrt(numel)``); the truth is the RMS change of the output over a fixed pool of
4096 inputs when only tensor ℓ takes the update just made, divided by its lr (``(f(W + ΔW_ℓ) − f(W)) / lr``).

Variants (all Kronecker/App. D statistics; they differ only in how samples are averaged):

- ``legacy``: the old hook: an EMA with weight 0.1 on each new probe (decay 0.9), 40 warm-up probes at step 1;
- ``alg1-per-probe``: Algorithm 1 read literally, weight β = 0.9 on each new probe, same warm-up, no restart;
- ``restart b=B p=P``: one measurement = the mean statistics of its probes (40 at step 1, ``P`` later); the
  averages restart after the warm-up; measurements enter an EMA with weight ``B`` on the newest.

Prints per variant and measured step the median, min and max over tensors of estimate / truth (pooled
over ``--seeds``), and writes ``--csv`` (one row per seed, variant, step, tensor).

    OMP_NUM_THREADS=1 python benchmarks/bench_flerm_tracking.py --seeds 0 1 2 --csv docs/flerm/tracking.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics

import torch
from torch import nn

from opzoo_mup.flerm.estimator import (
    KRONECKER,
    READOUT_BIAS,
    READOUT_WEIGHT,
    KroneckerEMA,
    finite_difference_fslr,
    z_statistics,
)
from opzoo_mup.flerm.probe import probe_gradients, z_samples

WARMUP, EVERY, STEPS, LR, BATCH, POOL = 40, 50, 301, 1e-2, 32, 4096


def mlp(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8)).double()


class Variant:
    """One way of averaging probe statistics into a per-tensor estimate."""

    def __init__(self, name: str, rules: dict[str, str], per_probe_beta: float | None = None,
                 beta: float = 1.0, probes: int = 1):
        self.name, self.rules, self.per_probe_beta, self.beta, self.probes = name, rules, per_probe_beta, beta, probes
        self.emas: dict[str, KroneckerEMA] = {}
        self.measurements = 0

    def n_probes(self) -> int:
        return WARMUP if self.measurements == 0 else (1 if self.per_probe_beta is not None else self.probes)

    def measure(self, stats: list[dict[str, torch.Tensor]]) -> dict[str, float]:
        """``stats``: per probe, ``{name: z_statistics}`` of this update."""
        if self.per_probe_beta is not None:
            if not self.emas:
                self.emas = {n: KroneckerEMA(r, self.per_probe_beta) for n, r in self.rules.items()}
            for s in stats:
                for n in self.rules:
                    self.emas[n].update_statistics(s[n])
        else:
            if self.measurements <= 1:  # fresh at the warm-up and again at the first periodic measurement
                self.emas = {n: KroneckerEMA(r, self.beta) for n, r in self.rules.items()}
            for n in self.rules:
                self.emas[n].update_statistics(torch.stack([s[n] for s in stats]).mean(0))
        self.measurements += 1
        return {n: e.value() for n, e in self.emas.items()}


def variants(rules: dict[str, str]) -> list[Variant]:
    out = [Variant("legacy", rules, per_probe_beta=0.1), Variant("alg1-per-probe", rules, per_probe_beta=0.9)]
    for beta in (1.0, 0.5):
        for probes in (1, 4):
            out.append(Variant(f"restart b={beta:g} p={probes}", rules, beta=beta, probes=probes))
    return out


def run(seed: int) -> list[dict]:
    teacher = mlp(1000 + seed)
    model = mlp(seed)
    gen = torch.Generator().manual_seed(seed)
    pool = torch.randn(POOL, 8, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        scale = teacher(pool).std()
    names = [n for n, _ in model.named_parameters()]
    rules = {n: KRONECKER for n in names}
    rules["4.weight"], rules["4.bias"] = READOUT_WEIGHT, READOUT_BIAS
    vs = variants(rules)
    opt = torch.optim.Adam([{"params": [p], "name": n} for n, p in model.named_parameters()], lr=LR, betas=(0.9, 0.999))
    params = dict(model.named_parameters())
    rows = []
    for i in range(STEPS):
        x = torch.randn(BATCH, 8, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            y = teacher(x) / scale
        loss = (model(x) - y).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        before = {n: p.detach().clone() for n, p in params.items()}
        opt.step()
        if not (i == 0 or i % EVERY == 0):
            continue
        deltas = {n: (params[n].detach() - before[n]) / LR for n in names}
        truth = finite_difference_fslr(lambda: model(pool), params, before, {n: LR for n in names})
        n_max = max(v.n_probes() for v in vs)
        probe_stats = []
        for k in range(n_max):
            xb = torch.randn(BATCH, 8, generator=gen, dtype=torch.float64)
            pg = torch.Generator().manual_seed(seed * 1_000_003 + i * 7_919 + k)
            probe_gradients(model, model, {"x": xb}, pg)
            zs = z_samples(params, deltas)
            probe_stats.append({n: z_statistics(zs[n], rules[n]) for n in names})
        model.zero_grad(set_to_none=True)
        for v in vs:
            est = v.measure(probe_stats[:v.n_probes()])
            for n in names:
                rows.append({"seed": seed, "variant": v.name, "step": i + 1, "tensor": n, "truth": truth[n],
                             "estimate": est[n], "ratio": est[n] / truth[n]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [r for s in args.seeds for r in run(s)]
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    steps = sorted({r["step"] for r in rows})
    names = list(dict.fromkeys(r["variant"] for r in rows))
    print("estimate / finite-difference truth, per measured step: median over tensors (worst seed's median) "
          f"[min, max over tensors and seeds]; seeds {args.seeds}")
    print("| variant | probes per measurement | " + " | ".join(f"step {s}" for s in steps) + " |")
    print("|---|---|" + "---|" * len(steps))
    for v in names:
        cells = []
        for s in steps:
            sel = [r for r in rows if r["variant"] == v and r["step"] == s]
            med = statistics.median(r["ratio"] for r in sel)
            per_seed = [statistics.median(r["ratio"] for r in sel if r["seed"] == sd) for sd in args.seeds]
            worst = max(per_seed, key=lambda m: abs(math.log(m)))
            cells.append(f"{med:.2f} ({worst:.2f}) [{min(r['ratio'] for r in sel):.2f}, {max(r['ratio'] for r in sel):.2f}]")
        probes = "40, then 1" if v in ("legacy", "alg1-per-probe") else f"40, then {v.split('p=')[1]}"
        print(f"| {v} | {probes} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

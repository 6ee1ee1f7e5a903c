"""FLeRM estimator accuracy: Kronecker (after the 40-sample warm-up, and its 300-probe expectation) and the
unbiased Monte-Carlo estimate against the exact ``‖Δ_ℓ f‖_RMS`` (brute force from per-output gradients).

The probes are those of ``tests/mup/test_flerm_estimator.py`` (float64; a small tanh MLP 8-64-64-8 and a
small FNO-1d, width 16, 6 complex modes, after 3 AdamW steps; one fixed batch, 300 draws of ω), so the
table in docs/flerm.md is what the tests check. For the FNO both treatments of the complex (real,
imaginary) dimension are shown: ``sum`` (default) and ``factor``.
Usage: ``OMP_NUM_THREADS=1 python benchmarks/bench_flerm_estimator.py [--out estimator.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from opzoo_mup.flerm import KroneckerEMA, MonteCarloEstimate, fslr_from_statistics, z_statistics  # noqa: E402
from tests.mup.test_flerm_estimator import probe_model  # noqa: E402


def kind(name: str, p: torch.Tensor, rule: str) -> str:
    if rule != "kronecker":
        return rule
    if p.is_complex():
        return "complex"
    return "vector" if p.ndim == 1 else "matrix"


def ratios(case: str, complex_dim: str) -> list[dict]:
    _, params, exact, rules, samples = probe_model(case, complex_dim)
    rows = []
    for n, p in params.items():
        ema = KroneckerEMA(rules[n])  # the hook's warm-up measurement: the mean statistics of 40 probes
        ema.update_statistics(torch.stack([z_statistics(s[n], rules[n]) for s in samples[:40]]).mean(0))
        mc = MonteCarloEstimate()
        for s in samples:
            mc.update(s[n])
        expectation = torch.stack([z_statistics(s[n], rules[n]) for s in samples]).mean(0)
        rows.append({"model": case, "complex_dim": complex_dim, "tensor": n, "shape": list(p.shape),
                     "kind": kind(n, p, rules[n]), "exact": exact[n],
                     "kron_warmup": ema.value() / exact[n],
                     "kron_expectation": fslr_from_statistics(expectation, rules[n]) / exact[n],
                     "mc": mc.value() / exact[n], "mc_se": mc.stderr() / exact[n]})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="JSON file for the per-tensor ratios")
    args = p.parse_args()
    rows = ratios("mlp", "sum") + ratios("fno", "sum") + ratios("fno", "factor")
    print(f"{'model':5} {'complex':7} {'tensor':24} {'kind':15} {'warm-up':>8} {'E[kron]':>8} {'MC ± se':>15}")
    for r in rows:
        print(f"{r['model']:5} {r['complex_dim']:7} {r['tensor']:24} {r['kind']:15} {r['kron_warmup']:8.3f} "
              f"{r['kron_expectation']:8.3f} {r['mc']:7.3f} ± {r['mc_se']:.3f}")
    print("\nranges of estimate / exact by kind:")
    keys = sorted({(r["model"], r["complex_dim"], r["kind"]) for r in rows})
    summary = []
    for key in keys:
        sel = [r for r in rows if (r["model"], r["complex_dim"], r["kind"]) == key]
        line = {"model": key[0], "complex_dim": key[1], "kind": key[2], "tensors": len(sel)}
        for f in ("kron_warmup", "kron_expectation", "mc"):
            line[f] = [round(min(r[f] for r in sel), 3), round(max(r[f] for r in sel), 3)]
        line["mc_within_1se"] = sum(abs(r["mc"] - 1) <= r["mc_se"] for r in sel)
        line["mc_within_2se"] = sum(abs(r["mc"] - 1) <= 2 * r["mc_se"] for r in sel)
        summary.append(line)
        print(json.dumps(line))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"torch": torch.__version__, "rows": rows, "summary": summary}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

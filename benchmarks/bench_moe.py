"""MoE benchmarks, side by side in one run (issue 12).

1. nestor-ti vs dpot-ti (and aot-moe-pot-t, aot-pot-t for reference): one training step (forward +
   backward, MSE on a random target) at the given batch and resolution, T_in 10, 4 channels.
   Target: nestor-ti <= 1.4x dpot-ti (the AOT-POT paper, App. C.12, reports +53 % for MoE-POT-T).
2. nestor-ti with N = 16 vs N = 4 image-level experts, top-1: target N = 16 within 1.3x of N = 4
   (sparse dispatch: each sample runs one expert whatever N is).
3. Dispatch overhead: the sparse MoE feed-forward (M = 4 MLP experts, top-2, plus 1 shared; D = 512,
   hidden 512, on the batch x 64 latent tokens of a DPOT-Ti step) against three dense MLPs on the same
   tokens, which do the same matmul work: the ratio is what routing, sorting, gathering and
   scattering add.

Rounds are interleaved (the order alternates every round); we print per-side medians, the ratio of
medians and the median of per-round ratios (the timing helpers of bench_aot.py). On a shared CPU,
``--clock cpu --threads 1`` (process CPU time) measures the work each side does.

To tell architecture cost from overhead, it also prints each model's floating-point operations per
training step (``torch.utils.flop_counter``: matmuls, convolutions, attention) and the rate of a
512x512x512 float32 matmul on this machine, so ``extra GFLOP / rate`` is the least time the extra
work of a model over dpot-ti can take here.

    python benchmarks/bench_moe.py --threads 1 --clock cpu --size 64 --batch 8 --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

import opzoo

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_aot  # noqa: E402  (side_by_side, report, training_step, CLOCKS)


def step_fns(models: dict[str, torch.nn.Module], batch: int, size: int):
    x = torch.randn(batch, size, size, 10, 4)
    target = torch.randn(batch, size, size, 1, 4)
    return {name: bench_aot.training_step(m, x, target) for name, m in models.items()}


def count(model: torch.nn.Module) -> str:
    return f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M"


def step_gflop(step: Callable[[], None]) -> float:
    """Floating-point operations of one call of ``step``, in GFLOP (FlopCounterMode)."""
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops() / 1e9


def matmul_gflops(n: int = 512, calls: int = 50) -> float:
    """GFLOP/s of an ``n x n x n`` float32 matmul, timed with the benchmark's clock."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    start = bench_aot.clock()
    for _ in range(calls):
        a @ b
    return 2 * n ** 3 * calls / (bench_aot.clock() - start) / 1e9


def bench_dispatch(args) -> list[str]:
    """Sparse MoE FFN vs three dense MLPs (same FLOPs), forward + backward on ``[batch, 64, 512]``."""
    torch.manual_seed(0)
    mlp = opzoo.get_registry().get("feedforward", "mlp")
    moe = opzoo.get_registry().get("feedforward", "moe")(512, hidden_dim=512, num_experts=4, top_k=2, num_shared=1)
    dense = torch.nn.ModuleList(mlp(512, hidden_dim=512) for _ in range(3))
    x = torch.randn(args.batch, 64, 512)

    def step(run):
        def go() -> None:
            xx = x.clone().requires_grad_(True)
            run(xx).sum().backward()
        return go

    fns = {"3 dense MLPs": step(lambda t: sum(m(t) for m in dense)), "sparse MoE FFN": step(moe)}
    gflop = step_gflop(fns["3 dense MLPs"])
    times = bench_aot.side_by_side("dispatch", fns, torch.device("cpu"), 3 * args.rounds, args.warmup)
    rate = gflop / statistics.median(times["3 dense MLPs"])
    lines = bench_aot.report(f"ffn fwd+bwd {args.batch}x64 tokens", times, "3 dense MLPs")
    return lines + [f"dense MLP training step: {gflop:.2f} GFLOP at {rate:.1f} GFLOP/s"], rate


def least_ratio(gflop: dict[str, float], times: dict[str, list[float]], rate: float) -> list[str]:
    """What nestor-ti's extra matmul work over dpot-ti costs at the dense-MLP rate, with no overhead."""
    extra = gflop["nestor-ti"] - gflop["dpot-ti"]
    base = statistics.median(times["dpot-ti"])
    return [f"nestor-ti - dpot-ti: {extra:.2f} GFLOP per step = {extra / rate * 1e3:.0f} ms at {rate:.1f} GFLOP/s: "
            f"nestor-ti >= {(base + extra / rate) / base:.2f}x dpot-ti even with zero overhead; 1.4x would need "
            f"{extra / (0.4 * base):.0f} GFLOP/s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=64, help="spatial resolution of the inputs")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--clock", choices=list(bench_aot.CLOCKS), default="wall")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-presets", action="store_true")
    parser.add_argument("--skip-experts", action="store_true")
    parser.add_argument("--skip-dispatch", action="store_true")
    args = parser.parse_args()
    bench_aot.clock = bench_aot.CLOCKS[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = torch.device("cpu")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, clock {args.clock}, "
          f"batch {args.batch}, {args.size}x{args.size}")
    lines = []
    if not args.skip_presets:
        torch.manual_seed(0)
        models = {name: opzoo.load(name) for name in ("dpot-ti", "nestor-ti", "aot-pot-t", "aot-moe-pot-t")}
        print("parameters: " + ", ".join(f"{n} {count(m)}" for n, m in models.items()))
        fns = step_fns(models, args.batch, args.size)
        gflop = {n: step_gflop(f) for n, f in fns.items()}
        print("GFLOP per step: " + ", ".join(f"{n} {g:.2f}" for n, g in gflop.items()))
        print(f"float32 matmul 512^3: {matmul_gflops():.1f} GFLOP/s")
        preset_times = bench_aot.side_by_side("presets", fns, cpu, args.rounds, args.warmup)
        lines += bench_aot.report(f"fwd+bwd b{args.batch} {args.size}^2", preset_times, "dpot-ti")
        del models
    if not args.skip_experts:
        torch.manual_seed(0)
        models = {}
        for n in (4, 16):
            block_args = {**opzoo.get_registry().preset("nestor-ti").args["block_args"], "n_experts": n}
            models[f"nestor-ti N={n}"] = opzoo.load("nestor-ti", block_args=block_args)
        times = bench_aot.side_by_side("experts", step_fns(models, args.batch, args.size), cpu, args.rounds,
                                       args.warmup)
        lines += bench_aot.report(f"top-1 fwd+bwd b{args.batch} {args.size}^2", times, "nestor-ti N=4")
    if not args.skip_dispatch:
        dispatch_lines, rate = bench_dispatch(args)
        lines += dispatch_lines
        if not args.skip_presets:
            lines += least_ratio(gflop, preset_times, rate)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""aot-pot-t against dpot-ti, side by side in one run: one training step (forward + backward, MSE
loss on a random target) at 128x128, T_in 10, 4 channels, per batch size.

Rows per batch: dpot-ti and aot-pot-t eager; aot-pot-t with its AOT residuals compiled (the
residual's ``compile`` switch, the CUDA default); and, with ``--whole-models``, both models under
``torch.compile`` (inductor), each ratio against its own dpot-ti. Timings are interleaved (A, B, B,
A, ...) so that drifting load affects both sides alike; per side the median, and per ratio the
ratio of medians and the median of the per-round ratios. On a CPU shared with other jobs, use
``--clock cpu --threads 1`` (process CPU time: the work each side does, not the scheduler).

    OMP_NUM_THREADS=1 python benchmarks/bench_aot.py --device cpu --clock cpu --threads 1 --rounds 5
    python benchmarks/bench_aot.py --device cuda --batches 1 --bf16
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Callable

import torch
from tqdm import tqdm

import opzoo
from opzoo_aot import AOTResidual


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def timed(fn: Callable[[], None], device: torch.device) -> float:
    synchronize(device)
    start = clock()
    fn()
    synchronize(device)
    return clock() - start


def side_by_side(label: str, fns: dict[str, Callable[[], None]], device: torch.device, rounds: int,
                 warmup: int) -> dict[str, list[float]]:
    """Seconds per call for each fn, interleaved; the order alternates every round."""
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    synchronize(device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in tqdm(range(rounds), desc=label, leave=False):
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(timed(fns[name], device))
    return times


def ratio_line(label: str, t: list[float], base: list[float]) -> str:
    return (f"{label:42s} ratio {statistics.median(t) / statistics.median(base):.3f}x "
            f"(median of per-round ratios {statistics.median(a / b for a, b in zip(t, base)):.3f}x)")


def set_aot_compile(model: torch.nn.Module, mode) -> None:
    """The AOT residuals' ``compile`` switch (True, False or "auto") on every sub-layer of ``model``."""
    for module in model.modules():
        if isinstance(module, AOTResidual):
            module.compile = mode


def training_step(model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor, aot_compile=None,
                  bf16: bool = False) -> Callable[[], None]:
    """One forward + backward (bf16 autocast when ``bf16``); ``aot_compile`` sets the AOT switch first."""
    autocast = torch.autocast(x.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def step() -> None:
        if aot_compile is not None:
            set_aot_compile(model, aot_compile)
        model.zero_grad(set_to_none=True)
        with autocast:
            loss = torch.nn.functional.mse_loss(model(x).float(), target)
        loss.backward()

    return step


def bench_models(device: torch.device, batches: list[int], rounds: int, warmup: int, size: int,
                 whole_models: bool = False, bf16: bool = False) -> list[str]:
    torch.manual_seed(0)
    models = {name: opzoo.load(name).to(device) for name in ("dpot-ti", "aot-pot-t")}
    lines = []
    for batch in batches:
        x = torch.randn(batch, size, size, 10, 4, device=device)
        target = torch.randn(batch, size, size, 1, 4, device=device)
        fns = {"dpot-ti": training_step(models["dpot-ti"], x, target, bf16=bf16),
               "aot-pot-t": training_step(models["aot-pot-t"], x, target, False, bf16),
               "aot-pot-t, AOT compiled": training_step(models["aot-pot-t"], x, target, True, bf16)}
        if whole_models:
            for name in ("dpot-ti", "aot-pot-t"):
                fns[f"{name}, torch.compile"] = training_step(torch.compile(models[name]), x, target, False, bf16)
        times = side_by_side(f"batch {batch}", fns, device, rounds, warmup)
        head = f"{device.type}{' bf16' if bf16 else ''} batch {batch} {size}^2"
        lines += [f"{head}: {name:32s} median {statistics.median(t) * 1e3:10.1f} ms" for name, t in times.items()]
        lines.append(ratio_line(f"{head}: aot-pot-t / dpot-ti, eager", times["aot-pot-t"], times["dpot-ti"]))
        lines.append(ratio_line(f"{head}: aot-pot-t (AOT compiled) / dpot-ti", times["aot-pot-t, AOT compiled"],
                                times["dpot-ti"]))
        if whole_models:
            lines.append(ratio_line(f"{head}: both under torch.compile", times["aot-pot-t, torch.compile"],
                                    times["dpot-ti, torch.compile"]))
    set_aot_compile(models["aot-pot-t"], "auto")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (compilation happens here)")
    parser.add_argument("--size", type=int, default=128, help="spatial resolution of the inputs")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall: elapsed time; cpu: this process's CPU time (CPU runs only)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--whole-models", action="store_true", help="also both models under torch.compile")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    if args.clock == "cpu" and device.type == "cuda":
        raise SystemExit("--clock cpu measures CPU work; use the wall clock for CUDA")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, clock {args.clock}, "
          f"device {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}")
    print("\n".join(bench_models(device, args.batches, args.rounds, args.warmup, args.size, args.whole_models,
                                 args.bf16)))


if __name__ == "__main__":
    main()

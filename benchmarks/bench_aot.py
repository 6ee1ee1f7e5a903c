"""AOT benchmarks, side by side in one run (issue 4).

1. aot-pot-t vs dpot-ti: forward + backward per training step (MSE loss on a random target) at
   batch 1 and 8, 128x128, T_in 10. Targets: <= 1.10x on CPU, <= 1.05x on GPU at batch 1.
2. One AOT residual alone vs the manifold-constrained hyper-connection layer (``mHC``) of the PyPI
   ``hyper-connections`` package at the same n = 4 and width D = 512, on aot-pot-t's latent grid
   (16x16 tokens), identity branch, forward + backward; the plain residual ``x + f(x)`` as the floor.
   ``opzoo aot`` takes and returns a plain ``[B, n, H, W, D]`` tensor like mHC; ``opzoo aot, state``
   takes an AOTState with the previous update pending, as inside a network.

Timings are interleaved (A, B, B, A, ...) so that a machine whose load drifts affects both sides
alike; we print per-side medians, the ratio of medians, the median of the per-round ratios, and
the ratio of each side's fastest round (the least disturbed by other jobs).
On a CPU shared with other jobs, wall-clock time mostly measures the scheduler; ``--clock cpu``
(process CPU time, best with ``--threads 1``) measures the work each side does.

    python benchmarks/bench_aot.py                    # CPU (and GPU when one is present)
    python benchmarks/bench_aot.py --rounds 7 --batches 1 8 --device cpu
    python benchmarks/bench_aot.py --device cpu --clock cpu --threads 1
    # the C kernels and the PyTorch path, eager and compiled (CUDA's default), against dpot-ti in the same rounds
    python benchmarks/bench_aot.py --device cpu --clock cpu --threads 1 --skip-residuals --aot-paths kernels torch compiled
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import opzoo
import torch
from opzoo_aot import AOTResidual, AOTState
from opzoo_aot.cpu_kernels import ENV_KERNELS
from opzoo_aot.sinkhorn import ENV_COMPILE
from tqdm import tqdm


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


def report(label: str, times: dict[str, list[float]], baseline: str, unit: float = 1e3) -> list[str]:
    """Lines: median per side and ratios against ``baseline``."""
    base = times[baseline]
    lines = []
    for name, t in times.items():
        med = statistics.median(t) * unit
        line = f"{label:28s} {name:22s} median {med:10.3f} ms"
        if name != baseline:
            ratio_of_medians = statistics.median(t) / statistics.median(base)
            median_ratio = statistics.median(a / b for a, b in zip(t, base))
            ratio_of_minimums = min(t) / min(base)  # each side's least disturbed round (timeit's advice)
            line += (f"   ratio {ratio_of_medians:.3f}x (median of per-round ratios {median_ratio:.3f}x, "
                     f"ratio of minimums {ratio_of_minimums:.3f}x)")
        lines.append(line)
    return lines


# ---- 1. whole models ---------------------------------------------------------------------------
def training_step(model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor,
                  aot_path: str | None = None) -> Callable[[], None]:
    """One forward + backward; ``aot_path`` (a key of :data:`AOT_PATHS`) selects the AOT implementation for it."""
    def step() -> None:
        if aot_path is not None:
            set_aot_path(aot_path)
        model.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), target).backward()

    return step


# --aot-paths: which implementations of aot-pot-t's AOT residual run, each against dpot-ti, and the
# environment that selects each (default: the caller's own)
AOT_PATHS = {
    "default": {},
    "kernels": {ENV_KERNELS: "1", ENV_COMPILE: "0"},  # the C kernels (CPU)
    "torch": {ENV_KERNELS: "0", ENV_COMPILE: "0"},  # the eager PyTorch path
    "compiled": {ENV_KERNELS: "0", ENV_COMPILE: "1"},  # the PyTorch path under torch.compile (CUDA's default)
}
CALLERS_ENVIRONMENT = {key: os.environ.get(key) for key in (ENV_KERNELS, ENV_COMPILE)}


def set_aot_path(path: str) -> None:
    """Sets the environment that selects ``path``'s implementation of the AOT residual."""
    for key, value in {**CALLERS_ENVIRONMENT, **AOT_PATHS[path]}.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def bench_models(device: torch.device, batches: list[int], rounds: int, warmup: int, size: int,
                 aot_paths: list[str] = ("default",)) -> list[str]:
    torch.manual_seed(0)
    models = {name: opzoo.load(name).to(device) for name in ("dpot-ti", "aot-pot-t")}
    lines = []
    for batch in batches:
        x = torch.randn(batch, size, size, 10, 4, device=device)
        target = torch.randn(batch, size, size, 1, 4, device=device)
        fns = {"dpot-ti": training_step(models["dpot-ti"], x, target)}
        for path in aot_paths:
            name = "aot-pot-t" if path == "default" else f"aot-pot-t ({path})"
            fns[name] = training_step(models["aot-pot-t"], x, target, path)
        times = side_by_side(f"fwd+bwd batch {batch}", fns, device, rounds, warmup)
        lines += report(f"{device.type} fwd+bwd b{batch} {size}^2", times, "dpot-ti")
    return lines


# ---- 2. residual layers alone -------------------------------------------------------------------
def residual_step(forward: Callable[[torch.Tensor], torch.Tensor], state: torch.Tensor) -> Callable[[], None]:
    state = state.detach().requires_grad_()

    def step() -> None:
        state.grad = None
        forward(state).square().mean().backward()

    return step


def bench_residuals(device: torch.device, batches: list[int], rounds: int, warmup: int, n: int = 4,
                    dim: int = 512, grid: int = 16) -> list[str]:
    from hyper_connections import mHC  # benchmark extra: pip install hyper-connections

    torch.manual_seed(0)
    aot = AOTResidual(dim, index=1, n=n).to(device)
    mhc = mHC(n, dim=dim, layer_index=1).to(device)
    identity = lambda u: u  # noqa: E731 - the branch is not what is measured

    def mhc_forward(streams: torch.Tensor) -> torch.Tensor:
        branch_input, add_residual = mhc(streams)
        return add_residual(identity(branch_input))

    def deferred_step(state: AOTState) -> Callable[[], None]:
        """The way a network runs the residual: an AOTState in (with the previous sub-layer's update
        pending), an AOTState out; the loss reads the updated streams."""
        leaves = [t.detach().requires_grad_() for t in (state.streams, state.pooled, state.y, state.H_res, state.h_post)]

        def step() -> None:
            for t in leaves:
                t.grad = None
            aot(AOTState(*leaves), identity).materialize().square().mean().backward()

        return step

    lines = []
    for batch in batches:
        x = torch.randn(batch, grid, grid, dim, device=device)
        aot_state = x.unsqueeze(1).expand(batch, n, grid, grid, dim).contiguous()  # [B, n, H, W, D]
        mhc_state = x.repeat_interleave(n, dim=0)  # [(B n), H, W, D], the package's layout
        previous = AOTResidual(dim, index=0, n=n).to(device)
        with torch.no_grad():
            pending = previous(aot.stream_adapter(dim, n=n).to(device).expand(x), identity)
        fns = {
            "plain x+f(x)": residual_step(lambda s: s + identity(s), x),
            "opzoo aot": residual_step(lambda s: aot(s, identity), aot_state),
            "opzoo aot, state": deferred_step(pending),
            "hyper-connections mHC": residual_step(mhc_forward, mhc_state),
        }
        times = side_by_side(f"residual batch {batch}", fns, device, rounds, warmup)
        lines += report(f"{device.type} residual b{batch} n{n} D{dim}", times, "hyper-connections mHC")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per side (model benchmark)")
    parser.add_argument("--residual-rounds", type=int, default=51)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--size", type=int, default=128, help="spatial resolution of the model inputs")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall: elapsed time; cpu: this process's CPU time (CPU runs only)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--skip-models", action="store_true")
    parser.add_argument("--skip-residuals", action="store_true")
    parser.add_argument("--aot-paths", nargs="+", choices=list(AOT_PATHS), default=["default"],
                        help="aot-pot-t's implementations to time against dpot-ti in the same rounds: "
                             "kernels (the C kernels), torch (the eager PyTorch path), compiled (the "
                             "PyTorch path under torch.compile, CUDA's default), default (whatever "
                             "OPZOO_AOT_CPU_KERNELS and OPZOO_AOT_COMPILE select)")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)

    devices = [torch.device("cpu")] if args.device == "cpu" else []
    if args.device in ("auto", "cuda") and torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    if args.device == "auto":
        devices.insert(0, torch.device("cpu"))
    if not devices:
        raise SystemExit("--device cuda: no CUDA device is available")
    if args.clock == "cpu" and any(d.type == "cuda" for d in devices):
        raise SystemExit("--clock cpu measures CPU work; use the wall clock for CUDA")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, clock {args.clock}, "
          f"CUDA: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    lines = []
    for device in devices:
        batches = args.batches if device.type == "cpu" else sorted({1, *args.batches})
        if not args.skip_models:
            lines += bench_models(device, batches, args.rounds, args.warmup, args.size, args.aot_paths)
        if not args.skip_residuals:
            lines += bench_residuals(device, batches, args.residual_rounds, args.warmup + 3)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

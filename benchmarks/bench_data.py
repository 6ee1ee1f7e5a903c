"""Data benchmarks (opzoo.data), printed as medians and ratios.

1. Generation throughput: Navier–Stokes vorticity, 64 x 64, nu = 1e-3, T = 50 frames (FNO's
   setting), in trajectories per second, float64 and float32, on the CPU and (if present) the GPU.
2. Random training-window reads: the median time to read one random window (t_in + 1 = 11 frames,
   128 x 128, 4 channels) from a canonical file, through ``TrajectorySource.read`` and through
   ``WindowDataset`` (resize 128 -> 64 + padding), with resident memory before and after to show
   it stays flat. The file's pages are dropped from the OS page cache first
   (``posix_fadvise(DONTNEED)``), so the first reads are cold. With ``--big`` the file is
   >= 1 GiB (64 trajectories x 64 frames), otherwise 64 MiB. The file is deleted afterwards.

    python benchmarks/bench_data.py [--big] [--threads 1] [--ns-n 8] [--reads 200] [--skip-generate]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import torch

from opzoo.data import CanonicalWriter, WindowDataset, open_source
from opzoo.data.generators import NavierStokes2D, generate_batch


def rss_mib() -> tuple[float, float]:
    """(current resident set, peak resident set) of this process, MiB, from /proc."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, amount, _ = line.split()
                values[key] = int(amount) / 1024
    return values.get("VmRSS:", float("nan")), values.get("VmHWM:", float("nan"))


def bench_generation(device: str, n: int, dtype: torch.dtype, repeats: int) -> float:
    """Median trajectories per second of NS 64x64, T = 50, one batch of ``n``."""
    gen = NavierStokes2D(res=64, nu=1e-3, device=device, dtype=dtype)
    rates = []
    for r in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        generate_batch(gen, seed=r, start=0, count=n)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def write_file(path: str, n: int, res: int, steps: int, channels: int) -> float:
    """A canonical file of random data, written one trajectory at a time; returns GiB."""
    rng = np.random.default_rng(0)
    with CanonicalWriter(path, n, (res, res), steps, [f"c{i}" for i in range(channels)]) as w:
        for _ in range(n):
            w.append(rng.standard_normal((1, res, res, steps, channels), dtype=np.float32))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # drop the file from the page cache
    finally:
        os.close(fd)
    return os.path.getsize(path) / 2**30


def bench_reads(path: str, reads: int, t_in: int) -> dict[str, float]:
    rng = np.random.default_rng(1)
    src = open_source(path)
    n, steps = src.n_samples, src.n_steps
    positions = [(int(rng.integers(n)), int(rng.integers(steps - t_in))) for _ in range(reads)]
    rss_before, _ = rss_mib()
    times, rss_trace = [], []
    for k, (sample, start) in enumerate(positions):
        t0 = time.perf_counter()
        src.read(sample, start, start + t_in + 1)
        times.append(time.perf_counter() - t0)
        if k % 20 == 0:
            rss_trace.append(rss_mib()[0])
    cold_count = max(1, reads // 4)
    ds = WindowDataset(src, t_in, 1, resolution=64, n_channels=6)
    ds_times = []
    for _ in range(min(reads, 100)):
        i = int(rng.integers(len(ds)))
        t0 = time.perf_counter()
        ds[i]
        ds_times.append(time.perf_counter() - t0)
    rss_after, rss_peak = rss_mib()
    return {
        "first_quarter_ms": 1e3 * statistics.median(times[:cold_count]),
        "all_ms": 1e3 * statistics.median(times),
        "dataset_ms": 1e3 * statistics.median(ds_times),
        "window_mib": (t_in + 1) * np.prod(src.spatial_shape) * src.n_channels * 4 / 2**20,
        "rss_before": rss_before,
        "rss_max_during": max(rss_trace),
        "rss_after": rss_after,
        "rss_peak": rss_peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", action="store_true", help="read benchmark on a >= 1 GiB file")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--ns-n", type=int, default=8, help="NS trajectories per timed batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("--dir", default=None, help="where the temporary file goes (default: system temp)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")

    if not args.skip_generate:
        print(f"\n[generation] NS 64x64, nu 1e-3, T = 50, batch of {args.ns_n}, median of {args.repeats}")
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        results = {}
        for device in devices:
            for dtype in (torch.float64, torch.float32):
                rate = bench_generation(device, args.ns_n, dtype, args.repeats)
                results[(device, dtype)] = rate
                print(f"  {device:5s} {str(dtype).removeprefix('torch.'):8s} {rate:8.3f} trajectories/s")
        base = results[("cpu", torch.float64)]
        for key, rate in results.items():
            print(f"  ratio {key[0]}/{str(key[1]).removeprefix('torch.')} : cpu/float64 = {rate / base:.2f}x")

    n, res, steps, channels = (64, 128, 64, 4) if args.big else (4, 128, 64, 4)
    handle, path = tempfile.mkstemp(suffix=".h5", dir=args.dir)
    os.close(handle)
    try:
        t0 = time.perf_counter()
        size = write_file(path, n, res, steps, channels)
        print(f"\n[reads] file [N, X, Y, T, C] = [{n}, {res}, {res}, {steps}, {channels}], {size:.2f} GiB "
              f"(written in {time.perf_counter() - t0:.1f} s, then dropped from the page cache)")
        r = bench_reads(path, args.reads, t_in=10)
        print(f"  window = 11 frames = {r['window_mib']:.2f} MiB; {args.reads} random windows")
        print(f"  median read, first quarter (cold): {r['first_quarter_ms']:.2f} ms")
        print(f"  median read, all:                  {r['all_ms']:.2f} ms")
        print(f"  median WindowDataset item (read + resize to 64 + pad to 6 channels): {r['dataset_ms']:.2f} ms")
        print(f"  RSS before reads {r['rss_before']:.0f} MiB, max during {r['rss_max_during']:.0f} MiB, "
              f"after {r['rss_after']:.0f} MiB (peak of the process {r['rss_peak']:.0f} MiB; file {size * 1024:.0f} MiB)")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()

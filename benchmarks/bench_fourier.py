"""Fourier benchmarks (opzoo-fourier): time per training step, printed as medians and ratios.

1. forward + backward + Adam step for every dpot-* and fno-* preset that fits the device
   (dpot-l / dpot-h are skipped on CPU: 0.5B / 1B parameters on a 2-core machine);
2. opzoo FNO-2D against neuraloperator's FNO at the same width (64), modes (16 per corner, i.e.
   the same kept frequencies), depth (4), grid (64x64) and batch (8), measured interleaved in the
   same run so both see the same machine load.

    python benchmarks/bench_fourier.py [--device cuda] [--repeats 15] [--skip-presets] [--plot out.png]
                                       [--threads 1 --clock cpu]

neuraloperator is a benchmark extra (``pip install neuraloperator``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from tqdm import tqdm

import opzoo

PRESET_INPUTS = {  # preset -> (batch, spatial size); dpot inputs have T_in=10, C=4; fno T_in=1, C=1
    "dpot-ti": (1, (128, 128)), "dpot-s": (1, (128, 128)), "dpot-m": (1, (128, 128)),
    "dpot-l": (1, (128, 128)), "dpot-h": (1, (128, 128)),
    "fno-1d": (8, (1024,)), "fno-2d": (8, (64, 64)), "fno-3d": (2, (32, 32, 32)),
}
CPU_SKIP = {"dpot-l": "509M parameters", "dpot-h": "1.03B parameters"}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(model, opt, x, y):
    """One forward + relative-L2 loss + backward + Adam step."""
    loss = ((model(x) - y).flatten(1).norm(dim=1) / (y.flatten(1).norm(dim=1) + 1e-8)).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def step_timer(model, x, y, device):
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def run() -> float:
        sync(device)
        t0 = clock()
        training_step(model, opt, x, y)
        sync(device)
        return clock() - t0

    return run


def bench_presets(device, repeats) -> list[tuple[str, str, float | None]]:
    rows = []
    for name in tqdm(list(PRESET_INPUTS), desc="presets", unit="preset"):
        batch, sizes = PRESET_INPUTS[name]
        if device.type == "cpu" and name in CPU_SKIP:
            rows.append((name, f"skipped on CPU ({CPU_SKIP[name]})", None))
            continue
        torch.manual_seed(0)
        model = opzoo.load(name).to(device)
        c = model.config
        x = torch.randn(batch, *sizes, c.in_timesteps, c.in_channels, device=device)
        y = torch.randn(batch, *sizes, c.out_timesteps, c.out_channels, device=device)
        run = step_timer(model, x, y, device)
        run()  # warm-up (allocations, FFT plans)
        n = repeats if name.startswith("fno") or name == "dpot-ti" else max(3, repeats // 3)
        times = [run() for _ in range(n)]
        rows.append((name, f"batch {batch}, {'x'.join(map(str, sizes))}", statistics.median(times)))
        del model, x, y
    return rows


def bench_fno_vs_neuralop(device, repeats, batch=8, n=64, width=64, modes=16, depth=4):
    from neuralop.models import FNO as NeuralopFNO

    torch.manual_seed(0)
    ours = opzoo.load("fno-2d", modes=modes, width=width, depth=depth).to(device)
    # neuraloperator counts n_modes over +/- frequencies and halves the last (rfft) dim:
    # (2K, 2K - 2) keeps rows -K..K-1 and rfft columns 0..K-1 -- exactly opzoo's K per corner.
    peers = {
        "neuralop FNO (classic: no channel MLP)": NeuralopFNO(
            n_modes=(2 * modes, 2 * modes - 2), in_channels=1, out_channels=1, hidden_channels=width,
            n_layers=depth, use_channel_mlp=False).to(device),
        "neuralop FNO (library defaults)": NeuralopFNO(
            n_modes=(2 * modes, 2 * modes - 2), in_channels=1, out_channels=1, hidden_channels=width,
            n_layers=depth).to(device),
    }
    x_ours = torch.randn(batch, n, n, 1, 1, device=device)
    y_ours = torch.randn(batch, n, n, 1, 1, device=device)
    x_peer, y_peer = x_ours[..., 0, :].movedim(-1, 1).contiguous(), y_ours[..., 0, :].movedim(-1, 1).contiguous()
    runs = {"opzoo fno-2d": step_timer(ours, x_ours, y_ours, device)}
    runs.update({k: step_timer(m, x_peer, y_peer, device) for k, m in peers.items()})
    params = {"opzoo fno-2d": sum(p.numel() for p in ours.parameters())}
    params.update({k: sum(p.numel() for p in m.parameters()) for k, m in peers.items()})
    for run in runs.values():
        run()
    times = {k: [] for k in runs}
    order = list(runs)
    for r in tqdm(range(repeats), desc="fno-2d vs neuralop (interleaved)", unit="round"):
        for k in order[r % len(order):] + order[:r % len(order)]:  # rotate who goes first
            times[k].append(runs[k]())
    base = times["opzoo fno-2d"]
    # (median time, params, median over rounds of the same-round ratio opzoo/this)
    return {k: (statistics.median(v), params[k], statistics.median(b / t for b, t in zip(base, v)))
            for k, v in times.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--skip-presets", action="store_true")
    parser.add_argument("--plot", help="write a bar chart of the step times to this PNG")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall: elapsed time; cpu: this process's CPU time (robust on a busy CPU "
                             "machine; with --threads 1 it is the work done; meaningless on GPU)")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"device {device} | torch {torch.__version__} | threads {torch.get_num_threads()} | clock {args.clock} | "
          f"{platform.processor() or platform.machine()}")
    rows = []
    if not args.skip_presets:
        print("\n# time per training step (forward + backward + Adam), median")
        rows = bench_presets(device, args.repeats)
        for name, what, t in rows:
            print(f"{name:8s} {what:28s} " + (f"{t * 1e3:10.1f} ms" if t is not None else ""))
    print(f"\n# FNO-2D, width 64, modes 16, 4 layers, 64x64, batch 8: median of {args.repeats} interleaved steps")
    results = bench_fno_vs_neuralop(device, args.repeats)
    base = results["opzoo fno-2d"][0]
    for name, (t, n_params, paired) in results.items():
        print(f"{name:42s} {t * 1e3:8.1f} ms  {n_params:>10,} params  "
              f"opzoo/this: ratio of medians {base / t:.2f}, median same-round ratio {paired:.2f}")
    if args.plot:
        plot(rows, results, device, args.plot)


def plot(rows, results, device, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [(n, t) for n, _, t in rows if t is not None]
    fig, axes = plt.subplots(1, 2 if measured else 1, figsize=(11 if measured else 6, 4), squeeze=False)
    if measured:
        ax = axes[0][0]
        ax.bar([n for n, _ in measured], [t * 1e3 for _, t in measured], color="tab:blue")
        ax.set_yscale("log")
        ax.set_ylabel("ms per training step (median)")
        ax.set_title(f"opzoo-fourier presets ({device.type})")
    ax = axes[0][-1]
    names = list(results)
    ax.barh([n.replace(" (", "\n(") for n in names], [results[n][0] * 1e3 for n in names],
            color=["tab:blue"] + ["tab:gray"] * (len(names) - 1))
    ax.set_xlabel("ms per training step (median)")
    ax.set_title("FNO-2D: width 64, modes 16, 4 layers,\n64x64, batch 8")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()

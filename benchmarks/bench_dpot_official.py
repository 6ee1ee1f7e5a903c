"""opzoo POT presets against the official DPOT code, side by side in one process (issue 16).

Forward + backward of one training step (MSE loss on a random target, gradients of every weight)
at 128x128, T_in 10, C 4. The official side is the official DPOT network's computation written
straight-line on the official state dict (``tests/fourier/reference_dpot.py``: channels-first
convolutions, zero-filled spectra, the einsum time aggregation), with the *same weights* as the
opzoo dpot model (converted by the ``dpot`` converter), so both sides compute the same function.
aot-pot-t is compared with the official DPOT-Ti (same dims, its own weights).

Rounds are interleaved (A B, B A, ...); we print each side's median, the ratio of medians and
the median of the per-round ratios (the number to read on a shared machine).

    python benchmarks/bench_dpot_official.py --threads 1 --clock cpu --rounds 15 --batches 1 8
    python benchmarks/bench_dpot_official.py --device cuda --batches 1 8      # on a GPU
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from tqdm import tqdm

import opzoo
from opzoo_fourier.dpot_converter import map_state_dict
from opzoo_fourier.presets import DPOT

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fourier.reference_dpot import dpot_forward_official, official_state_dict  # noqa: E402

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
# max |opzoo - official| / max |official| of the same-weights prediction: float32 rounding of two
# summation orders (1e-7 measured on CPU); checked with TF32 off on a GPU
PARITY_TOL = 1e-4
# opzoo preset -> the official DPOT model it is timed against
OFFICIAL_OF = {"dpot-ti": "dpot-ti", "dpot-s": "dpot-s", "aot-pot-t": "dpot-ti"}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def full_float32():
    """TF32 off for CUDA matmuls and convolutions (cuDNN uses it by default), restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def official_weights(name: str, device: torch.device, seed: int = 0, size: int = 128) -> dict[str, torch.Tensor]:
    """Random official-layout weights of DPOT preset ``name`` for ``size``^2 inputs (leaves that require grad)."""
    dims = DPOT.variant(name).args
    sd = official_state_dict(width=dims["width"], depth=dims["depth"], n_blocks=dims["mixer_args"]["n_blocks"],
                             mlp_ratio=dims["mlp_ratio"], out_layer_dim=dims["out_layer_dim"], patch=8, img=size, c_in=4, c_out=4, t_in=10,
                             t_out=1, n_cls=12, generator=torch.Generator().manual_seed(seed))
    return {k: v.to(device).requires_grad_() for k, v in sd.items()}


def official_step(sd: dict[str, torch.Tensor], x: torch.Tensor, target: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        for v in sd.values():
            v.grad = None
        y, _ = dpot_forward_official(sd, x, modes=32, patch=8, t_out=1)
        F.mse_loss(y, target).backward()

    return step


def opzoo_step(model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        F.mse_loss(model(x), target).backward()

    return step


def opzoo_model(name: str, official: dict[str, torch.Tensor], device: torch.device, size: int = 128) -> torch.nn.Module:
    """The opzoo preset for ``size``^2 inputs; a dpot-* preset gets the official side's weights
    through the converter."""
    torch.manual_seed(0)
    model = opzoo.load(name, img_size=[size, size]).to(device)
    if name.startswith("dpot-"):
        converted = map_state_dict({k: v.detach() for k, v in official.items()}, Path(f"<{name} weights>"))
        opzoo.model_io.weights.load_state_dict_strict(model, converted, f"official {name} weights")
    return model


def interleaved(fns: dict[str, Callable[[], None]], device: torch.device, rounds: int, warmup: int,
                clock: Callable[[], float], label: str) -> dict[str, list[float]]:
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in tqdm(range(rounds), desc=label, leave=False):
        for name in names if r % 2 == 0 else names[::-1]:
            synchronize(device)
            t0 = clock()
            fns[name]()
            synchronize(device)
            times[name].append(clock() - t0)
    return times


def compare(name: str, batch: int, device: torch.device, rounds: int, warmup: int, clock, size: int = 128) -> dict:
    """Times of opzoo ``name`` and the official DPOT code side by side: a result row (seconds)."""
    official = official_weights(OFFICIAL_OF[name], device, size=size)
    model = opzoo_model(name, official, device, size)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, size, size, 10, 4, generator=g).to(device)
    target = torch.randn(batch, size, size, 1, 4, generator=g).to(device)
    diff = None
    if name.startswith("dpot-"):  # same weights: the two sides must compute the same function
        with torch.no_grad(), full_float32():
            want, _ = dpot_forward_official(official, x, modes=32, patch=8, t_out=1)
            diff = (model(x) - want).abs().max().item() / want.abs().max().item()
        if diff > PARITY_TOL:
            raise SystemExit(f"{name}: opzoo and the official code disagree (max rel. difference {diff:.2e})")
    fns = {"official": official_step(official, x, target), "opzoo": opzoo_step(model, x, target)}
    times = interleaved(fns, device, rounds, warmup, clock, f"{name} b{batch}")
    o, z = times["official"], times["opzoo"]
    return {"preset": name, "official_of": OFFICIAL_OF[name], "batch": batch, "official": statistics.median(o),
            "opzoo": statistics.median(z), "ratio_of_medians": statistics.median(z) / statistics.median(o),
            "median_ratio": statistics.median(a / b for a, b in zip(z, o)), "rounds": rounds, "max_rel_diff": diff}


def format_row(r: dict) -> str:
    return (f"{r['preset']:10s} vs official {r['official_of']:8s} batch {r['batch']}: official {r['official'] * 1e3:9.1f} ms"
            f"  opzoo {r['opzoo'] * 1e3:9.1f} ms  opzoo/official: ratio of medians {r['ratio_of_medians']:.3f}, "
            f"median of per-round ratios {r['median_ratio']:.3f}")


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--presets", nargs="+", default=list(OFFICIAL_OF), choices=list(OFFICIAL_OF))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="cpu: process CPU time (with --threads 1: the work done; CPU runs only)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.clock == "cpu" and device.type != "cpu":
        raise SystemExit("--clock cpu measures CPU work; use the wall clock on a GPU")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"device {device} | torch {torch.__version__} | threads {torch.get_num_threads()} | clock {args.clock}")
    rows = []
    for name in args.presets:
        for batch in args.batches:
            rows.append(compare(name, batch, device, args.rounds, args.warmup, CLOCKS[args.clock], args.size))
            print(format_row(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    main()

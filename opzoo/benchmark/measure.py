"""What one forward or training step costs: FLOPs and bytes of every op, the activations kept for backward, time.

FLOPs are torch's own formulas (``torch.utils.flop_counter``: matmuls, convolutions, attention; 2 per multiply-add,
elementwise ops not counted) with three changes: a product of complex tensors counts 4 real multiply-adds per
complex one (8 FLOPs), and an FFT of length ``N`` counts ``5 N log2 N`` FLOPs complex-to-complex and half that for
the real-to-complex or complex-to-real axis (FFTW's convention); a convolution's backward counts one forward convolution per gradient. Bytes are each op's inputs plus outputs (views are
free), at the sizes a bf16 run would move: 2 bytes per real floating value, 8 per complex value (FFTs stay in
complex64), integers as they are. Both work on ``meta`` tensors, so that presets too big for this machine are
still counted.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class Roofline:
    """A device's peak compute and memory bandwidth: an op takes at least ``max(flops / peak, bytes / bandwidth)``."""

    name: str
    flops_per_s: float
    bytes_per_s: float


# NVIDIA H100 SXM5 datasheet: 989.4 TFLOP/s dense bf16 tensor-core, 3.35 TB/s HBM3
H100_BF16 = Roofline("H100 SXM bf16", 989.4e12, 3.35e12)
ADAM_BYTES_PER_PARAM = 28  # fp32 master weights: read p, grad, m, v and write p, m, v


def _fft_flops(args, out) -> int:
    """``aten._fft_r2c/_fft_c2r/_fft_c2c(self, dim, ...)``: 5 N log2 N per complex axis, half on the real one."""
    x, dims = args[0], [d % args[0].ndim for d in args[1]]
    if x.is_complex() and out.is_complex():  # c2c
        return int(sum(5 * x.numel() * math.log2(max(x.shape[d], 1)) for d in dims))
    if not x.is_complex():  # r2c: the last axis real -> half spectrum, then the others complex on the output
        last, rest = dims[-1], dims[:-1]
        real = 2.5 * x.numel() * math.log2(max(x.shape[last], 1))
        return int(real + sum(5 * out.numel() * math.log2(max(out.shape[d], 1)) for d in rest))
    last, rest = dims[-1], dims[:-1]  # c2r: the others complex on the input, then the last axis to real
    return int(sum(5 * x.numel() * math.log2(max(x.shape[d], 1)) for d in rest)
               + 2.5 * out.numel() * math.log2(max(out.shape[last], 1)))


FFT_OPS = {aten._fft_r2c, aten._fft_c2r, aten._fft_c2c}


def _conv_backward_flops(args) -> int:
    """``aten.convolution_backward``: each gradient asked for (input, weight) costs one forward convolution,
    ``2 B prod(spatial) weight.numel()`` with the output's grid (the input's for a transposed one). torch's own
    formula over-counts grouped (depthwise) convolutions by orders of magnitude."""
    grad_out, x, weight, transposed, mask = args[0], args[1], args[2], args[7], args[10]
    grid = x.shape[2:] if transposed else grad_out.shape[2:]
    return 2 * x.shape[0] * math.prod(grid) * weight.numel() * (int(mask[0]) + int(mask[1]))


def _bytes(t: torch.Tensor) -> int:
    if t.is_complex():
        return t.numel() * 8
    if t.is_floating_point():
        return t.numel() * 2
    return t.numel() * t.element_size()


class OpCosts(TorchDispatchMode):
    """``with OpCosts() as c: step()`` records ``(flops, bytes)`` of every op ``step`` runs (backward included)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if func.is_view or packet in (aten.detach, aten.alias, aten._unsafe_view):
            return out
        tensors_in = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        tensors_out = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        flops = 0
        if packet in FFT_OPS:
            flops = _fft_flops(args, out)
        elif packet is aten.convolution_backward:
            flops = _conv_backward_flops(args)
        elif packet in flop_registry:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
            if any(t.is_complex() for t in tensors_in):
                flops *= 4
        self.ops.append((flops, sum(_bytes(t) for t in tensors_in + tensors_out)))
        return out

    @property
    def flops(self) -> int:
        return sum(f for f, _ in self.ops)

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.ops)

    def roofline_seconds(self, device: Roofline, extra_bytes: int = 0) -> float:
        """The sum over ops of each op's roofline time (no fusion, no launch overhead), plus ``extra_bytes``
        moved at full bandwidth: a lower bound for unfused eager code, an estimate, not a measurement."""
        return sum(max(f / device.flops_per_s, b / device.bytes_per_s) for f, b in self.ops) \
            + extra_bytes / device.bytes_per_s


def interleaved_medians(runs: dict[str, Callable[[], None]], repeats: int, warmup: int = 1,
                        clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds of each run, ``repeats`` rounds in turn (the first of a round rotates, so that all see the same
    machine load); ``warmup`` untimed rounds first. Returns every time, per run."""
    for _ in range(warmup):
        for run in runs.values():
            run()
    times: dict[str, list[float]] = {k: [] for k in runs}
    order = list(runs)
    for r in range(repeats):
        for key in order[r % len(order):] + order[:r % len(order)]:
            t0 = clock()
            runs[key]()
            times[key].append(clock() - t0)
    return times


def median_ratio(a: list[float], b: list[float]) -> float:
    """The median over rounds of ``a / b`` in the same round: the ratio to read on a shared, noisy machine."""
    return statistics.median(x / y for x, y in zip(a, b))


# One training step in a fresh process (a process that has trained before holds freed memory it reuses): its peak
# resident memory over its resident memory before the step, with the peak reset first (Linux's clear_refs 5).
_STEP_MEMORY = r"""
import json, sys, torch
from opzoo.model_io.loading import load
from opzoo.benchmark.presets import training_loss
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
model = load(sys.argv[1]).train()
x = torch.randn(*json.loads(sys.argv[2]))
optimizer = torch.optim.AdamW(model.parameters())
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
out = model(x)
training_loss(model, out, torch.zeros_like(out)).backward()
optimizer.step()
print(json.dumps({"before": before, "peak": status("VmHWM")}))
"""


def step_memory_mib(model_dir: str, shape: Iterable[int]) -> float | None:
    """The memory one training step (forward, backward, the first AdamW step: gradients and Adam's two moments)
    adds at its peak, measured: a fresh process loads the model saved in ``model_dir``, resets its peak resident
    memory and runs the step on a batch of ``shape``; MiB over its resident memory before the step. None where it
    cannot be measured (no /proc/self/clear_refs: not Linux)."""
    import json
    import os
    import subprocess
    import sys

    if not os.path.exists("/proc/self/clear_refs"):
        return None
    result = subprocess.run([sys.executable, "-c", _STEP_MEMORY, str(model_dir), json.dumps(list(shape))],
                            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if result.returncode != 0:  # said, and "n/a" in the table: a cost table is no reason to stop a comparison
        import logging

        why = (result.stderr.strip().splitlines() or ["no output"])[-1]
        logging.getLogger("opzoo").warning(f"the memory of a training step of {model_dir} was not measured: {why}")
        return None
    numbers = json.loads(result.stdout.strip().splitlines()[-1])
    return (numbers["peak"] - numbers["before"]) / 2**20

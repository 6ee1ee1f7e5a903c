"""Accuracy of the AOT residual's two float32 paths against the same network in float64 (issue 11).

The network of tests/aot/test_cpu_kernels.py::test_network_with_pooled_buffers_matches_float64
(simple backbone, AOT residual with perturbed parameters, seed 3, width 64, depth 2, input
[2, 32, 32, 3, 2]). For each path, the largest error of each kind of AOT parameter gradient,
relative to that gradient's scale (max |g| of the float64 reference), and of the output.

    OMP_NUM_THREADS=1 python benchmarks/aot_accuracy.py
"""

from __future__ import annotations

import copy
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.aot.test_cpu_kernels import aot_network, forward_backward  # noqa: E402

from opzoo_aot import cpu_kernels  # noqa: E402

KINDS = ("phi_pre", "phi_post", "phi_res", "b_pre", "b_post", "b_res", "alpha_pre", "alpha_post", "alpha_res", "g")


def errors(result, reference):
    """``{kind: max relative error}`` over the AOT parameters, plus the output."""
    out = {"output": ((result[0].double() - reference[0]).abs().max() / reference[0].abs().max()).item()}
    largest = max(g.abs().max().item() for g in reference[1].values())
    for name, grad in reference[1].items():
        kind = name.rsplit(".", 1)[-1]
        if kind not in KINDS or grad.abs().max().item() < 1e-6 * largest:  # vanishing at this state
            continue
        err = ((result[1][name].double() - grad).abs().max() / grad.abs().max()).item()
        out[kind] = max(out.get(kind, 0.0), err)
    return out


def main() -> None:
    torch.manual_seed(0)
    model, x = aot_network(seed=3, width=64, depth=2), torch.randn(2, 32, 32, 3, 2)
    reference = forward_backward(copy.deepcopy(model).double(), x.double())
    table = {}
    for path, env in (("C kernels", "1"), ("PyTorch path", "0")):
        os.environ[cpu_kernels.ENV_KERNELS] = env
        table[path] = errors(forward_backward(model, x), reference)
    print(f"torch {torch.__version__}, {platform.machine()}, threads {torch.get_num_threads()}")
    print("| quantity | " + " | ".join(table) + " |")
    print("|---|" + "---|" * len(table))
    for kind in ("output", *KINDS):
        if all(kind in t for t in table.values()):
            print(f"| {kind} | " + " | ".join(f"{t[kind]:.1e}" for t in table.values()) + " |")


if __name__ == "__main__":
    main()

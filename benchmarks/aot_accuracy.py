"""Accuracy of the AOT residual in float32 against the same network in float64 (docs/accuracy.md).

The network of issue 11 (``aot_network`` of tests/aot/test_residual.py: simple backbone with AOT
residuals whose parameters are perturbed, seed 3, width 64, depth 2, input [2, 32, 32, 3, 2], so
S·D = 65536 features per stream): the largest
error of each kind of AOT parameter gradient, relative to that gradient's scale (max |g| of the
float64 run), and of the output, eager and (``--compiled``) with the residual's compile switch on.

    OMP_NUM_THREADS=1 python benchmarks/aot_accuracy.py
    python benchmarks/aot_accuracy.py --device cuda --compiled    # float64 reference on the same device, TF32 off
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
from pathlib import Path

import torch

from opzoo_aot import AOTResidual

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.aot.test_residual import aot_network, forward_backward  # noqa: E402

KINDS = ("phi_pre", "phi_post", "phi_res", "b_pre", "b_post", "b_res", "alpha_pre", "alpha_post", "alpha_res", "g")


def errors(result, reference) -> dict[str, float]:
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compiled", action="store_true", help="also with the residual's compile switch on")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model, x = aot_network(seed=3, width=64, depth=2), torch.randn(2, 32, 32, 3, 2)
    model, x = model.to(args.device), x.to(args.device)
    reference = forward_backward(copy.deepcopy(model).double(), x.double())
    table = {"eager": errors(forward_backward(model, x), reference)}
    if args.compiled:
        for module in model.modules():
            if isinstance(module, AOTResidual):
                module.compile = True
        table["compiled"] = errors(forward_backward(model, x), reference)
    device = torch.cuda.get_device_name() if x.is_cuda else f"{platform.machine()}, threads {torch.get_num_threads()}"
    print(f"torch {torch.__version__}, {device}")
    print("| quantity | " + " | ".join(table) + " |")
    print("|---|" + "---|" * len(table))
    for kind in ("output", *KINDS):
        print(f"| {kind} | " + " | ".join(f"{t[kind]:.1e}" for t in table.values()) + " |")


if __name__ == "__main__":
    main()

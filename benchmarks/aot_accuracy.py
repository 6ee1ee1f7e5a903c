"""Accuracy of the AOT residual in float32 against the same network in float64 (docs/accuracy.md).

The network of issue 11 (simple backbone with AOT residuals whose parameters are perturbed, seed
3, width 64, depth 2, input [2, 32, 32, 3, 2], so S·D = 65536 features per stream): the largest
error of each kind of AOT parameter gradient, relative to that gradient's scale (max |g| of the
float64 run), and of the output, eager and (``--compiled``) with the residual's compile switch on.

    OMP_NUM_THREADS=1 python benchmarks/aot_accuracy.py
    python benchmarks/aot_accuracy.py --device cuda --compiled    # float64 reference on the same device, TF32 off
"""

from __future__ import annotations

import argparse
import copy
import platform

import opzoo
import torch
from opzoo_aot import AOTResidual

KINDS = ("phi_pre", "phi_post", "phi_res", "b_pre", "b_post", "b_res", "alpha_pre", "alpha_post", "alpha_res", "g")


def aot_network(seed: int = 0, width: int = 16, depth: int = 3) -> torch.nn.Module:
    """A simple-backbone AOT network whose residual parameters are perturbed, so the streams differ."""
    torch.manual_seed(seed)
    model = opzoo.create_model("simple", residual="aot", in_channels=2, out_channels=2, in_timesteps=3,
                               width=width, depth=depth)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "residual" in name or name == "streams.g":
                p.add_(torch.randn(p.shape, generator=g) * 0.2)
    return model


def forward_backward(model: torch.nn.Module, x: torch.Tensor):
    """``(output, {name: gradient})`` of a fixed linear functional of the output."""
    model.zero_grad(set_to_none=True)
    out = model(x)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return out.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


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

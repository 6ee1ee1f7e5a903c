"""One probe of the network: ``φ = Σ m ω f / sqrt(Σ m)`` on a batch, backward, ``Z = ΔW ⊙ ∂φ/∂W`` per tensor.

``f [B, *S, T_out, C]`` is the model's prediction; ``m`` the batch's channel mask (padded channels
are not part of the function); ``ω ~ N(0, 1)`` from a seeded CPU generator. Also finds the readout
layer for the App. D rules: the last linear map (``nn.Linear`` or a 1x1 convolution) whose output
*is* the model's output (same storage, only reshaped), so its rows are the output features.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import torch
from torch import Tensor, nn

from .estimator import z_sample


def output_weights(f: Tensor, mask: Tensor | None) -> Tensor:
    """``[B, 1, …, 1, C]`` 0/1 weights of the outputs that count (all 1 without a mask)."""
    if mask is None:
        return torch.ones(1, device=f.device, dtype=f.dtype).reshape([1] * f.ndim)
    return mask.to(f.dtype).reshape(f.shape[0], *([1] * (f.ndim - 2)), f.shape[-1])


def probe_gradients(model: nn.Module, forward: Callable[[Tensor], Tensor], batch: Mapping[str, Tensor],
                    generator: torch.Generator) -> None:
    """Leave ``∂φ/∂W`` in every parameter's ``.grad`` (after zeroing them)."""
    model.zero_grad(set_to_none=True)
    f = forward(batch["x"])
    if f.dtype in (torch.float16, torch.bfloat16):  # autocast output: φ in float32
        f = f.float()
    w = output_weights(f, batch.get("mask"))
    omega = torch.randn(f.shape, generator=generator, dtype=torch.float32).to(f.device, f.dtype)
    count = float(w.expand_as(f).sum())
    phi = (omega * w * f).sum() / math.sqrt(max(count, 1.0))
    phi.backward()


def z_samples(named: Mapping[str, nn.Parameter], deltas: Mapping[str, Tensor],
              reduce: Callable[[Tensor], Tensor] | None = None, world_size: int = 1,
              complex_dim: str = "sum") -> dict[str, Tensor]:
    """``Z`` per tensor from the ``.grad`` left by :func:`probe_gradients` (zeros where there is none).

    Under DDP each rank probes its shard: ``φ`` of the global batch is ``Σ_r φ_r / sqrt(W)``, so the
    global gradient is ``sqrt(W) · mean_r(∂φ_r/∂W)`` (``reduce`` is the all-reduce mean).
    """
    out = {}
    for name, p in named.items():
        g = p.grad
        if g is None:
            g = torch.zeros_like(p)
        elif reduce is not None and world_size > 1:
            g = reduce(g) * math.sqrt(world_size)
        out[name] = z_sample(deltas[name], g, complex_dim)
    return out


def find_readout(model: nn.Module, forward: Callable[[Tensor], Tensor], x: Tensor) -> list[str]:
    """Names of the readout weight (and bias) for the App. D rules, or ``[]`` when the output is not
    the plain output of a linear map (then every tensor uses the Kronecker rule)."""
    outputs: dict[str, Tensor] = {}

    def is_linear_map(m: nn.Module) -> bool:
        if isinstance(m, nn.Linear):
            return True
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            return all(k == 1 for k in m.kernel_size) and m.groups == 1
        return False

    handles = []
    for name, m in model.named_modules():
        if is_linear_map(m):
            handles.append(m.register_forward_hook(lambda mod, inp, out, name=name: outputs.__setitem__(name, out)))
    try:
        with torch.no_grad():
            f = forward(x)
    finally:
        for h in handles:
            h.remove()
    for name, out in outputs.items():
        if out.numel() == f.numel() and out.untyped_storage().data_ptr() == f.untyped_storage().data_ptr():
            prefix = f"{name}." if name else ""
            return [f"{prefix}weight"] + ([f"{prefix}bias"] if getattr(model.get_submodule(name), "bias", None) is not None else [])
    return []

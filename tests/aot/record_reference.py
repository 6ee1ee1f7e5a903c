"""Records the outputs of the AOT plugin as it was before issue 25 (the C-kernel version, commit
3c6ffcb), so that the rewrite is checked against them (tests/aot/test_saved_weights.py).

Run once, with the old code, from the repository root:

    OMP_NUM_THREADS=1 python tests/aot/record_reference.py

It writes tests/aot/data/: ``aot-pot-random/`` (a small pot config with AOT residuals and random
parameters, saved with ``save_pretrained``) and ``reference_outputs.safetensors`` (fixed seeded
inputs and the old code's outputs for that model and for the aot-pot-micro weights shipped then, in
float64 and float32; those weights are kept in tests/aot/data/aot-pot-micro-2026-11-23/, since the shipped ones
were retrained in issue 60).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors.torch import save_file

import opzoo

DATA = Path(__file__).parent / "data"
RANDOM_ARGS = dict(in_channels=2, out_channels=2, in_timesteps=3, img_size=[16, 16], patch_size=4, width=16,
                   depth=2, out_layer_dim=8, mixer="fourier-attention", mixer_args={"n_blocks": 2, "modes": 2}, n_cls=2)


def random_aot_model() -> torch.nn.Module:
    """A small pot model with AOT residuals whose parameters are all random (φ, α, biases, g too)."""
    torch.manual_seed(0)
    args = {**opzoo.micro.pot_micro_preset_args(block="sandwich", residual="aot"), **RANDOM_ARGS}
    model = opzoo.create_model("pot", **args)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".phi_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 3.0 / math.sqrt(p.shape[0]))
            elif name.rsplit(".", 1)[-1] in ("b_pre", "b_post", "b_res", "alpha_pre", "alpha_post", "alpha_res", "g"):
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
    return model.eval()


def inputs(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def main() -> None:
    DATA.mkdir(exist_ok=True)
    tensors = {}
    random_model = random_aot_model()
    random_model.save_pretrained(DATA / "aot-pot-random")
    micro = opzoo.load("aot-pot-micro", pretrained=True).eval()
    for key, model, x in (("random", random_model, inputs((2, 16, 16, 3, 2), 2)),
                          ("micro", micro, inputs((2, 32, 32, 10, 2), 3))):
        with torch.no_grad():
            tensors[f"{key}.input"] = x
            tensors[f"{key}.output_float32"] = model(x)
            tensors[f"{key}.output_float64"] = model.double()(x.double())
            model.float()
    save_file(tensors, DATA / "reference_outputs.safetensors",
              metadata={"recorded_with": "opzoo-aot before issue 25 (commit 3c6ffcb), C kernels on CPU"})
    for k, v in tensors.items():
        print(k, tuple(v.shape), v.dtype, float(v.abs().max()))
    for key in ("random", "micro"):
        a, b = tensors[f"{key}.output_float32"].double(), tensors[f"{key}.output_float64"]
        print(key, "float32 vs float64, max abs diff", float((a - b).abs().max()))


if __name__ == "__main__":
    main()

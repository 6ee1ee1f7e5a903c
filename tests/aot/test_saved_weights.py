"""Saved aot-pot-* repos load unchanged into the rewritten AOT residual (issue 25) and give the
outputs recorded with the code before it (tests/aot/record_reference.py, the C-kernel version). "micro" is the
aot-pot-micro weights of 2026-11-23 that the recording used (data/aot-pot-micro-2026-11-23/; the shipped ones were
retrained on 2026-11-28, issue 60)."""

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import opzoo

DATA = Path(__file__).parent / "data"
REFERENCE = load_file(DATA / "reference_outputs.safetensors")


def load(key: str) -> torch.nn.Module:
    if key == "random":
        return opzoo.load(f"local-dir:{DATA / 'aot-pot-random'}").eval()
    return opzoo.load(f"local-dir:{DATA / 'aot-pot-micro-2026-11-23'}").eval()


@pytest.mark.parametrize("key", ["random", "micro"])
def test_parameter_names_and_shapes_are_the_saved_ones(key):
    path = DATA / ("aot-pot-random" if key == "random" else "aot-pot-micro-2026-11-23")
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        saved = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    model = load(key)
    assert {name: tuple(t.shape) for name, t in model.state_dict().items()} == saved


@pytest.mark.parametrize("key", ["random", "micro"])
def test_outputs_equal_the_recorded_ones(key):
    """float32 outputs of the new code against the old code's float64 outputs. Tolerance: the old
    code's own float32 run differed from its float64 run by 8e-8 (random) and 2.2e-6 (micro, 4
    blocks, output scale 1.3); float32 rounding of a different but equivalent order of operations
    gives differences of that size, so 5x the old float32 error, at least 1e-6 of the scale. The
    float64 runs agree to 3e-8 / 4e-7, the old code's mean over the positions being float32 even
    for float64 streams."""
    x, old64 = REFERENCE[f"{key}.input"], REFERENCE[f"{key}.output_float64"]
    old32 = REFERENCE[f"{key}.output_float32"]
    model = load(key)
    with torch.no_grad():
        out = model(x)
        out64 = model.double()(x.double())
    scale = old64.abs().max().item()
    tolerance = max(5 * (old32.double() - old64).abs().max().item(), 1e-6 * scale)
    assert (out.double() - old64).abs().max().item() <= tolerance
    assert (out64 - old64).abs().max().item() <= 1e-6 * scale

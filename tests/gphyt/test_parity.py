"""opzoo's GPhyT against FloWsnr/General-Physics-Transformer's own network at 4374116 (the commit that published the
weights), recorded in its own process by tests/gphyt/record_reference.py: the recorded upstream checkpoint (DDP and
torch.compile prefixes, optimizer state, the run's config) goes through opzoo's converter, and opzoo's network and its
physical-field wrapper must give upstream's predictions with every integrator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import opzoo
from opzoo_gphyt.converter import convert_gphyt

from ..recording import assert_same_outputs, rerun_recording

DATA = Path(__file__).parent / "data"
RECORDED = load_file(str(DATA / "reference.safetensors"))
META = json.loads((DATA / "reference.json").read_text())
INTEGRATORS = META["integrators"]


def model_from(integrator: str, **overrides) -> torch.nn.Module:
    converted = convert_gphyt(DATA / "gphyt-small.pth", num_heads=2, integrator=integrator)
    model = opzoo.create_model("gphyt", **{**converted.model_args, **overrides})
    model.load_state_dict(converted.state_dict, strict=True)
    return model.eval()


def test_the_recording_is_upstreams_at_the_commit_that_published_the_weights():
    assert META["commit"].startswith("4374116")


def test_the_converter_reads_the_recorded_config_and_strips_both_prefixes():
    converted = convert_gphyt(DATA / "gphyt-small.pth", num_heads=2)
    assert converted.model_args["integrator"] == "Euler"  # as the file's config records
    assert (converted.model_args["in_timesteps"], tuple(converted.model_args["img_size"])) == (3, (16, 8))
    assert all(k.startswith("net.") for k in converted.state_dict)


@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_the_network_is_upstreams_in_float64(integrator):
    net = model_from(integrator).double().net
    with torch.no_grad():
        y = net(RECORDED["input"])
    want = RECORDED[f"{integrator}.output64"]
    assert y.shape == want.shape == (2, 1, 16, 8, 3)
    assert (y - want).abs().max().item() <= 1e-12 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("integrator", INTEGRATORS)
def test_the_network_is_upstreams_in_float32_within_its_own_rounding(integrator):
    """float32 against upstream's float32: within 4x the larger of the two sides' own distance from the float64 truth
    (the same operations, in another order where opzoo fuses or reshapes), 1e-5 floor."""
    net = model_from(integrator).net
    with torch.no_grad():
        y32 = net(RECORDED["input"].float()).double()
    truth, theirs = RECORDED[f"{integrator}.output64"], RECORDED[f"{integrator}.output32"].double()
    own, upstream_own = (y32 - truth).abs().max().item(), (theirs - truth).abs().max().item()
    assert (y32 - theirs).abs().max().item() <= max(4 * own, 4 * upstream_own, 1e-5)
    assert own <= 1e-4 * max(1.0, truth.abs().max().item())


@pytest.mark.parametrize("integrator", ["Euler", "RK4"])
def test_the_wrapper_takes_physical_fields_in_opzoos_layout(integrator):
    """``[B, H, W, T, C]`` through the wrapper without normalization is the network on ``[B, T, H, W, C]``; with
    ``instance`` it is upstream's ``normalize_data`` (per sample and channel, unbiased std + 1e-6) around it."""
    x = RECORDED["input"]
    plain = model_from(integrator, normalization="none").double()
    with torch.no_grad():
        y = plain(x.permute(0, 2, 3, 1, 4))
    assert torch.allclose(y, RECORDED[f"{integrator}.output64"].permute(0, 2, 3, 1, 4), rtol=0, atol=1e-12)
    scaled = x * 4.0 - 3.0
    mean = scaled.mean(dim=(1, 2, 3), keepdim=True)
    std = scaled.std(dim=(1, 2, 3), keepdim=True) + 1e-6
    with torch.no_grad():
        want = plain.net((scaled - mean) / std) * std + mean
        got = model_from(integrator, normalization="instance").double()(scaled.permute(0, 2, 3, 1, 4))
    assert torch.allclose(got, want.permute(0, 2, 3, 1, 4), rtol=0, atol=1e-10)


@pytest.mark.slow
def test_upstream_live_gives_the_recording(tmp_path):
    """Reruns tests/gphyt/record_reference.py against the checkout in $OPZOO_GPHYT_REPO, in its own process."""
    rerun_recording(Path(__file__).with_name("record_reference.py"), tmp_path, "OPZOO_GPHYT_REPO",
                    "FloWsnr/General-Physics-Transformer at 4374116")
    assert_same_outputs(load_file(str(tmp_path / "reference.safetensors")), RECORDED)

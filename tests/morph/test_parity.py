"""opzoo's MORPH against lanl/MORPH's own network (a16d5c4), recorded in its own process by
tests/morph/record_reference.py: the recorded upstream checkpoints go through opzoo's converter, and opzoo's network
and its physical-field wrapper must give upstream's predictions, for 1-D, 2-D and 3-D inputs, with the position table
sliced and interpolated in time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import opzoo
from opzoo_morph.converter import convert_morph

from ..recording import assert_same_outputs, rerun_recording

DATA = Path(__file__).parent / "data"
RECORDED = load_file(str(DATA / "reference.safetensors"))
META = json.loads((DATA / "reference.json").read_text())
CASES = list(META["cases"])
POSITIONS = list(META["positions"])


def model_from(positions: str, **overrides) -> torch.nn.Module:
    """The recorded upstream checkpoint, converted and built by opzoo (heads are not in the tensors)."""
    converted = convert_morph(DATA / f"morph-small-{positions}.pth", heads=4, heads_xa=4, time_positions=positions)
    model = opzoo.create_model("morph", **{**converted.model_args, **overrides})
    model.load_state_dict(converted.state_dict, strict=True)
    return model.eval()


@pytest.fixture(scope="module", params=POSITIONS)
def positions(request):
    return request.param


def test_the_recording_is_upstreams_at_the_tested_commit():
    assert META["repo"] == "lanl/MORPH" and META["commit"].startswith("a16d5c4")


@pytest.mark.parametrize("case", CASES)
def test_the_network_is_upstreams_in_float64(positions, case):
    net = model_from(positions).double().net
    x = RECORDED[f"{positions}.{case}.input"]
    with torch.no_grad():
        y = net(x)
    want = RECORDED[f"{positions}.{case}.output64"]
    assert y.shape == want.shape
    assert (y - want).abs().max().item() <= 1e-12 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("case", CASES)
def test_the_network_is_upstreams_in_float32_within_its_own_rounding(positions, case):
    """float32 against upstream's float32: within 4x the distance of opzoo's float32 from the float64 truth (each
    side rounds differently: opzoo skips the zero taps and zero features upstream adds) and 1e-5 absolute."""
    model = model_from(positions)
    x = RECORDED[f"{positions}.{case}.input"]
    with torch.no_grad():
        y32 = model.net(x.float()).double()
    truth, theirs = RECORDED[f"{positions}.{case}.output64"], RECORDED[f"{positions}.{case}.output32"].double()
    own = (y32 - truth).abs().max().item()
    assert (y32 - theirs).abs().max().item() <= max(4 * own, 4 * (theirs - truth).abs().max().item(), 1e-5)
    assert own <= 1e-4 * max(1.0, truth.abs().max().item())


def channels_of(v: torch.Tensor) -> torch.Tensor:
    """Upstream's ``[B, T, F, C, D, H, W]`` as opzoo's ``[B, *S, T, F*C]`` (the singleton leading axes dropped)."""
    b, t, f, c = v.shape[:4]
    grid = [n for n in v.shape[4:]]
    while len(grid) > 1 and grid[0] == 1:
        grid.pop(0)
    x = v.reshape(b, t, f * c, *grid)
    return x.movedim(1, -1).movedim(1, -1)


@pytest.mark.parametrize("case", CASES)
def test_the_wrapper_lays_out_fields_and_axes_as_upstream(positions, case):
    """Physical fields ``[B, *S, T, C]`` through the wrapper (no normalization; every field of the recording has
    the same number of components) give upstream's prediction in the same layout."""
    v = RECORDED[f"{positions}.{case}.input"]
    f, c = v.shape[2:4]
    model = model_from(positions, in_channels=f * c, out_channels=f * c, in_timesteps=v.shape[1],
                       field_components=[c] * f, normalization="none").double()
    with torch.no_grad():
        y = model(channels_of(v))
    want = channels_of(RECORDED[f"{positions}.{case}.output64"].unsqueeze(1))
    assert y.shape == want.shape
    assert (y - want).abs().max().item() <= 1e-12 * max(1.0, want.abs().max().item())


def test_revin_is_upstreams_normalization_of_the_window(positions):
    """normalization='revin' is upstream's RevIN (per sample and field, over frames, components and points,
    ``sqrt(var + 1e-6)``) applied to the window, the network, and the inverse: checked by hand on the recording."""
    v = RECORDED[f"{positions}.2d.input"] * 3.0 + 5.0
    f, c = v.shape[2:4]
    model = model_from(positions, in_channels=f * c, out_channels=f * c, in_timesteps=v.shape[1],
                       field_components=[c] * f).double()
    flat = v.transpose(1, 2).reshape(v.shape[0], f, -1)
    mu, var = flat.mean(-1), flat.var(-1, unbiased=False)
    scale = torch.sqrt(var + 1e-6)[:, None, :, None, None, None, None]
    normalized = (v - mu[:, None, :, None, None, None, None]) / scale
    with torch.no_grad():
        want = model.net(normalized) * scale[:, 0] + mu[:, :, None, None, None, None]
        y = model(channels_of(v))
    assert (y - channels_of(want.unsqueeze(1))).abs().max().item() <= 1e-11


@pytest.mark.slow
def test_upstream_live_gives_the_recording(tmp_path):
    """Reruns tests/morph/record_reference.py against the checkout in $OPZOO_MORPH_REPO, in its own process."""
    rerun_recording(Path(__file__).with_name("record_reference.py"), tmp_path, "OPZOO_MORPH_REPO", "lanl/MORPH")
    assert_same_outputs(load_file(str(tmp_path / "reference.safetensors")), RECORDED)

"""opzoo's MPP AViT against upstream's own ``AViT`` (PolymathicAI/multiple_physics_pretraining @ e751fc2), recorded in
its own process by tests/mpp/record_reference.py: the recorded ``train_basic.py`` checkpoint goes through opzoo's
converter, and opzoo's network and its physical-field wrapper must give upstream's predictions, for four grids, slot
subsets and boundaries, one step and a rollout, in float64 and float32.

The cases keep every sequence (frames and patches per axis) at most 8 long: T5's buckets are exact there, while from
distance 8 on they come from a float32 logarithm whose last bit may differ between CPUs (both sides compute it with the
same torch op, so the live test below holds at any length)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import opzoo
from opzoo_mpp.converter import convert_mpp

from ..recording import assert_same_outputs, rerun_recording

DATA = Path(__file__).parent / "data"
RECORDED = load_file(str(DATA / "reference.safetensors"))
META = json.loads((DATA / "reference.json").read_text())
CASES = list(META["cases"])
CHECKOUT = "PolymathicAI/multiple_physics_pretraining at e751fc2"


def model_from(**overrides) -> torch.nn.Module:
    converted = convert_mpp(DATA / "mpp-small.tar")
    model = opzoo.create_model("mpp-avit", **{**converted.model_args, **overrides})
    model.load_state_dict(converted.state_dict, strict=True)
    return model.eval()


def test_the_recording_is_upstreams_at_the_tested_commit():
    assert META["repo"] == "PolymathicAI/multiple_physics_pretraining" and META["commit"].startswith("e751fc2")


def test_the_converted_sizes_are_the_recorded_networks():
    args = convert_mpp(DATA / "mpp-small.tar").model_args
    small = META["small"]
    assert (args["dim"], args["heads"], args["depth"], len(args["state_names"])) == (
        small["embed_dim"], small["num_heads"], small["processor_blocks"], small["n_states"])


@pytest.mark.parametrize("case", CASES)
def test_the_network_is_upstreams_in_float64(case):
    c = META["cases"][case]
    net = model_from().double().net
    with torch.no_grad():
        y = net(RECORDED[f"{case}.input"], torch.tensor(c["slots"]), (c["periodic"],) * 2)
    want = RECORDED[f"{case}.output64"]
    assert y.shape == want.shape
    assert (y - want).abs().max().item() <= 1e-10 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("case", CASES)
def test_the_network_is_upstreams_in_float32_within_its_own_rounding(case):
    """float32 against upstream's float32: within 4x the larger of the two sides' distances from the float64 truth
    (they round alike but not identically: opzoo reshapes where upstream's einops rearranges), and near the truth."""
    c = META["cases"][case]
    net = model_from().net
    with torch.no_grad():
        y32 = net(RECORDED[f"{case}.input"].float(), torch.tensor(c["slots"]), (c["periodic"],) * 2).double()
    truth, theirs = RECORDED[f"{case}.output64"], RECORDED[f"{case}.output32"].double()
    own = (y32 - truth).abs().max().item()
    assert (y32 - theirs).abs().max().item() <= max(4 * own, 4 * (theirs - truth).abs().max().item(), 1e-5)
    assert own <= 1e-4 * max(1.0, truth.abs().max().item())


def as_opzoo(u: torch.Tensor) -> torch.Tensor:
    """Upstream's ``[T, B, C, H, W]`` as opzoo's ``[B, X, Y, T, C]`` (X = upstream's H)."""
    return u.permute(1, 3, 4, 0, 2)


def wrapped(case: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """The recorded network as the ``mpp-avit`` backbone reading the case's slots by name, and the case's input."""
    c = META["cases"][case]
    names = opzoo.get_registry().get("backbone", "mpp-avit").config_class().state_names
    u = RECORDED[f"{case}.input"]
    model = model_from(in_channels=len(c["slots"]), out_channels=len(c["slots"]), in_timesteps=u.shape[0],
                       fields=[names[i] for i in c["slots"]], periodic=c["periodic"]).double()
    return model, u


@pytest.mark.parametrize("case", CASES)
def test_the_wrapper_lays_out_fields_slots_and_axes_as_upstream(case):
    """Physical fields ``[B, X, Y, T, C]``, each channel named by its slot, through the backbone give upstream's
    prediction in the same layout."""
    model, u = wrapped(case)
    with torch.no_grad():
        y = model(as_opzoo(u))
    want = RECORDED[f"{case}.output64"].permute(0, 2, 3, 1).unsqueeze(-2)
    assert y.shape == want.shape
    assert (y - want).abs().max().item() <= 1e-10 * max(1.0, want.abs().max().item())


def test_a_rollout_is_upstreams_window_slid_forward():
    model, u = wrapped(META["rollout"])
    with torch.no_grad():
        y = model.rollout(as_opzoo(u), steps=3)  # [B, X, Y, 3, C]
    want = RECORDED[f"{META['rollout']}.rollout64"].permute(1, 3, 4, 0, 2)  # [3, B, C, H, W] -> [B, X, Y, 3, C]
    assert (y - want).abs().max().item() <= 1e-10 * max(1.0, want.abs().max().item())


def test_forward_features_and_head_compose_to_forward():
    u = RECORDED[f"{CASES[0]}.input"]
    model = model_from(in_timesteps=u.shape[0]).double()
    x = as_opzoo(u)
    with torch.no_grad():
        assert torch.equal(model.forward_head(model.forward_features(x), x), model(x))
        last, kept = model.forward_intermediates(x)
        assert len(kept) == len(model.net.blocks) and torch.equal(last, model.forward_features(x))


@pytest.mark.slow
def test_upstream_live_gives_the_recording(tmp_path):
    """Reruns tests/mpp/record_reference.py against the checkout in $OPZOO_MPP_REPO, in its own process."""
    rerun_recording(Path(__file__).with_name("record_reference.py"), tmp_path, "OPZOO_MPP_REPO", CHECKOUT)
    live = load_file(str(tmp_path / "reference.safetensors"))
    assert_same_outputs(live, RECORDED, ("output64", "rollout64"))
    assert json.loads((tmp_path / "reference.json").read_text())["sizes"] == META["sizes"]


@pytest.mark.slow
def test_upstream_live_at_sixteen_frames_and_a_128_grid():
    """The pretraining shape (16 frames, 8 x 8 patches) and a 256 x 128 grid, where T5's logarithmic buckets are used:
    upstream's AViT in this process on the same weights (needs $OPZOO_MPP_REPO)."""
    from opzoo_mpp.converter import UpstreamCall, upstream_network

    if not os.environ.get("OPZOO_MPP_REPO"):
        pytest.skip(f"OPZOO_MPP_REPO does not name a checkout of {CHECKOUT}")
    for t, grid, periodic in ((16, (128, 128), False), (12, (256, 128), True)):
        model = model_from(in_timesteps=t, periodic=periodic).double()
        call = UpstreamCall(upstream_network(model), model.slots.tolist(), periodic)
        x = torch.randn(1, *grid, t, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        with torch.no_grad():
            y, want = model(x), call(model.to_upstream(x)).permute(0, 2, 3, 1).unsqueeze(-2)
        assert (y - want).abs().max().item() <= 1e-10 * max(1.0, want.abs().max().item())

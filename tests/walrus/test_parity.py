"""opzoo's Walrus against the code it rests on, recorded in processes of their own by tests/walrus/record_reference.py:
Polymathic AI's fork ``walrus_steering`` @ e963fad (the blocks, the stem's convolutions, the decoder on non-periodic
axes, the stride table, the parameter count at the published size) and the JAX port of FhG-IISB/foundax @ 7a90e3a (the
whole network on the recorded stand-in's weights: the SpaceBag columns, the boundary padding and flags, the periodic
decoder; the jitter's padded and rolled grid).

Every sequence is short (at most 3 frames): T5's buckets are exact there (from distance 8 on they come from a float32
logarithm). The rotary embedding's positions are torch's float32 ``linspace`` on both sides (the port's patched to it),
as upstream makes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from opzoo_walrus.converter import convert_walrus
from opzoo_walrus.fields import FIELD_INDEX_MAP
from opzoo_walrus.network import kernels_for, parameter_count
from safetensors.torch import load_file

import opzoo

DATA = Path(__file__).parent / "data"
RECORDED = load_file(str(DATA / "reference.safetensors"))
META = json.loads((DATA / "reference.json").read_text())
SMALL = META["small"]
NETWORK_CASES = [c for c in META["port_cases"] if c not in ("jitter", "rollout")]


@pytest.fixture(autouse=True)
def recorded_positions(monkeypatch):
    """The rotary positions as the recording's CPU made them (torch's float32 linspace, which another CPU may round
    otherwise in a few places: 4 of 16 differ between a fused and an unfused multiply-add), so that the float64
    comparisons check opzoo's arithmetic, not this CPU's linspace; test_this_cpus_positions_are_within_float32_rounding_of_the_recordings
    compares them."""
    import opzoo_walrus.blocks as blocks

    recorded = {int(k.split(".")[-1]): v for k, v in RECORDED.items() if k.startswith("port.positions.")}
    own = blocks.pixel_positions
    monkeypatch.setattr(blocks, "pixel_positions",
                        lambda n, device=None: recorded[n].to(device) if n in recorded else own(n, device))


def test_this_cpus_positions_are_within_float32_rounding_of_the_recordings():
    for key, value in RECORDED.items():
        if key.startswith("port.positions."):
            n = int(key.split(".")[-1])
            assert (torch.linspace(-1, 1, steps=n) - value).abs().max() <= 2 * torch.finfo(torch.float32).eps, n


def converted(path=DATA / "walrus-small.pt"):
    """The stand-in through the converter: its 12 slots are the published map's first 12."""
    return convert_walrus(path, field_names=FIELD_INDEX_MAP[:SMALL["n_states"]])


def converted_model(**overrides) -> torch.nn.Module:
    c = converted()
    model = opzoo.create_model("walrus", **{**c.model_args, "drop_path": 0.0, **overrides})
    model.load_state_dict(c.state_dict, strict=True)
    return model.eval()


def close(y: torch.Tensor, want: torch.Tensor, rtol: float) -> bool:
    return y.shape == want.shape and (y.double() - want.double()).abs().max().item() <= rtol * max(
        1.0, want.abs().max().item())


def test_the_recordings_are_of_the_tested_commits():
    assert META["fork"]["repo"] == "PolymathicAI/walrus_steering" and META["fork"]["commit"].startswith("e963fad")
    assert META["port"]["repo"] == "FhG-IISB/foundax" and META["port"]["commit"].startswith("7a90e3a")


def test_the_published_size_has_upstreams_parameter_count():
    """1,286,199,047: the fork's parts at the published sizes (without the layer scales the published tree does not
    hold), and opzoo's network on the meta device, and the README's 1.29 billion."""
    p = META["published"]
    ours = parameter_count(p["n_states"], p["hidden"], p["heads"], p["depth"], p["inner"], p["groups"])
    assert ours == META["published_parameters"] == 1_286_199_047
    with torch.device("meta"):
        model = opzoo.load("walrus")
    assert sum(t.numel() for t in model.parameters()) == ours


def test_the_stand_in_converts_and_the_model_holds_exactly_its_tensors():
    payload = torch.load(DATA / "walrus-small.pt", weights_only=True)
    theirs = payload["app"]["model"]
    model = converted_model()
    mine = {k[len("net."):]: v for k, v in model.state_dict().items()}
    assert set(mine) == set(theirs)
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    args = converted().model_args
    assert (args["hidden"], args["heads"], args["depth"], args["inner"], len(args["field_names"])) == (
        SMALL["hidden"], SMALL["heads"], SMALL["depth"], SMALL["inner"], SMALL["n_states"])


def test_the_stride_table_is_upstreams():
    for grid, kernels in META["kernel_choices"].items():
        assert [list(k) for k in kernels_for(tuple(int(n) for n in grid.split("x")))] == kernels, grid


@pytest.mark.parametrize("dtype,tag,rtol", [(torch.float64, "f64", 1e-10), (torch.float32, "f32", 1e-5)])
@pytest.mark.parametrize("case", ["blocks-2d", "blocks-3d"])
def test_the_blocks_are_the_forks(case, dtype, tag, rtol):
    net = converted_model().net.to(dtype)
    h = RECORDED[f"fork.{case}.input"].to(dtype)
    with torch.no_grad():
        for block in net.blocks:
            h = block(h)
    assert close(h, RECORDED[f"fork.{case}.{tag}"], rtol)


@pytest.mark.parametrize("dtype,tag,rtol", [(torch.float64, "f64", 1e-10), (torch.float32, "f32", 1e-5)])
@pytest.mark.parametrize("case", ["encoder-2d", "encoder-3d"])
def test_the_stem_is_the_forks(case, dtype, tag, rtol):
    c = META["fork_cases"][case]
    net = converted_model().net.to(dtype)
    with torch.no_grad():
        y = net.embed["3"](RECORDED[f"fork.{case}.input"].to(dtype), torch.tensor(c["columns"]), c["kernels"])
    assert close(y, RECORDED[f"fork.{case}.{tag}"], rtol)


@pytest.mark.parametrize("dtype,tag,rtol", [(torch.float64, "f64", 1e-10), (torch.float32, "f32", 1e-5)])
@pytest.mark.parametrize("case", ["decoder-2d", "decoder-3d"])
def test_the_decoder_is_the_forks_on_non_periodic_axes(case, dtype, tag, rtol):
    c = META["fork_cases"][case]
    net = converted_model().net.to(dtype)
    with torch.no_grad():
        y = net.debed["3"](RECORDED[f"fork.{case}.input"].to(dtype), torch.tensor(c["labels"]), c["kernels"],
                           [False] * 3)
    assert close(y, RECORDED[f"fork.{case}.{tag}"], rtol)


@pytest.mark.parametrize("case", NETWORK_CASES)
def test_the_whole_network_is_the_ports_in_float64(case):
    """Every input step's normalized change (causal), 2-D and 3-D, wall, open and periodic sides, no jitter."""
    c = META["port_cases"][case]
    net = converted_model().double().net
    with torch.no_grad():
        y = net(RECORDED[f"port.{case}.input"].double(), torch.tensor(c["labels"]), c["bcs"])
    assert close(y, RECORDED[f"port.{case}.f64"], 1e-10)


@pytest.mark.parametrize("case", NETWORK_CASES)
def test_the_whole_network_in_float32_is_near_the_ports_float64(case):
    c = META["port_cases"][case]
    net = converted_model().net
    with torch.no_grad():
        y = net(RECORDED[f"port.{case}.input"], torch.tensor(c["labels"]), c["bcs"])
    assert close(y, RECORDED[f"port.{case}.f64"], 1e-4)


def test_the_jittered_grid_is_the_ports():
    """The padded grid with its three flag channels, rolled by the port's draw: opzoo pads, flags and rolls as the
    port's ``_jitter_forward`` with ``jitter_patches=True`` (which the port calls before the ``encoder_dummy`` scale:
    it is 1 here, its use checked by the whole-network cases)."""
    j = META["port_cases"]["jitter"]
    c = META["port_cases"][j["case"]]
    net = converted_model().double().net
    x = RECORDED[f"port.{j['case']}.input"].double()
    with torch.no_grad():
        net.encoder_dummy.fill_(1.0)
        padded, _ = net.pad(x, c["bcs"], j["rolls"])
    assert torch.equal(padded.unflatten(0, x.shape[:2]), RECORDED["port.jitter.padded"].double())
    assert [list(k) for k in kernels_for(c["grid"])] == j["kernels"]


def test_a_jittered_prediction_comes_back_to_the_grid():
    """With the port's rolls and per-block rolls, the output is on the input's grid, finite, and differs from the
    unjittered one by no more than the jitter's effect (a few tenths of the output, not a misplaced grid)."""
    j = META["port_cases"]["jitter"]
    c = META["port_cases"][j["case"]]
    net = converted_model().double().net
    x = RECORDED[f"port.{j['case']}.input"].double()
    labels = torch.tensor(c["labels"])
    rolls = [[0, 5, 0], [0, 3, 0]]  # the tokens along the periodic second axis
    with torch.no_grad():
        y = net(x, labels, c["bcs"], jitter=j["rolls"], rolls=rolls)
        plain = net(x, labels, c["bcs"])
    assert y.shape == plain.shape and torch.isfinite(y).all()
    assert 0 < (y - plain).abs().mean() < plain.abs().mean()


@pytest.mark.slow
def test_the_recording_reruns_live(tmp_path):
    """Reruns tests/walrus/record_reference.py (needs $OPZOO_WALRUS_FORK, $OPZOO_WALRUS_PORT and $OPZOO_JAX_PATH)."""
    names = ("OPZOO_WALRUS_FORK", "OPZOO_WALRUS_PORT", "OPZOO_JAX_PATH")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not set (checkouts of walrus_steering @ e963fad, foundax @ 7a90e3a, and a "
                    "directory with jax and equinox)")
    subprocess.run([sys.executable, str(Path(__file__).with_name("record_reference.py")), str(tmp_path)],
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, capture_output=True, timeout=900)
    live = load_file(str(tmp_path / "reference.safetensors"))
    for key, value in RECORDED.items():
        if key.endswith(".f64"):
            assert close(live[key], value, 1e-12), key
    assert json.loads((tmp_path / "reference.json").read_text())["published_parameters"] == META["published_parameters"]


@pytest.mark.slow
def test_the_benchmarks_upstream_is_the_forks_parts_on_the_same_weights():
    """`opzoo benchmark`'s upstream (needs $OPZOO_WALRUS_FORK): the fork's stem, blocks and decoder holding the model's
    weights give opzoo's prediction of the last frame; a periodic axis is refused (the fork's decoder does not wrap)."""
    from opzoo_walrus.upstream import build_upstream_walrus

    if not os.environ.get("OPZOO_WALRUS_FORK"):
        pytest.skip("OPZOO_WALRUS_FORK does not name a checkout of PolymathicAI/walrus_steering at e963fad")
    torch.manual_seed(0)
    model = opzoo.load("walrus", hidden=32, heads=2, depth=2, inner=8, groups=4, drop_path=0.0, jitter=False,
                       boundaries=("wall", "open/wall")).double().eval()
    x = torch.randn(1, 128, 32, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    up = build_upstream_walrus(model, x)
    with torch.no_grad():
        theirs = up.outputs(up.module(up.inputs(x)))[0]
        v = model.to_upstream(x)
        h, plan = model.net.encode(v / model.rms(v)[0], model.slots, model.bcs, None)
        mine = model.net.debed["2"](model.net.process(h, model.bcs, None)[-1], model.slots, plan[1], [False] * 3)
    assert close(mine, theirs, 1e-12)
    with pytest.raises(opzoo.UpstreamUnavailable, match="no periodic wrap"):
        build_upstream_walrus(opzoo.load("walrus", hidden=32, heads=2, depth=1, inner=8, groups=4), x.float())


def test_a_rollout_is_upstreams_window_slid_forward():
    """Three steps as upstream's trainer rolls out (rollout_model): the fork's SamplewiseRevNormalization (float32
    statistics, as its compute_stats casts) around the port's network, the last frame plus the denormalized change, the
    window slid forward. Within float32 rounding: upstream's normalization computes in float32."""
    r = META["port_cases"]["rollout"]
    c = META["port_cases"][r["case"]]
    u = RECORDED[f"port.{r['case']}.input"].double()  # [T, B, C, H, W, 1]
    names = [FIELD_INDEX_MAP[i] for i in c["labels"]]
    model = converted_model(fields=tuple(names), in_channels=len(names), out_channels=len(names),
                            in_timesteps=u.shape[0], boundaries=("wall", "periodic"), jitter=False)
    assert model.slots.tolist() == r["labels"]  # velocity_z appended, as upstream pads 2-D data
    x = u[..., 0].permute(1, 3, 4, 0, 2)  # -> [B, X, Y, T, C]
    want = RECORDED["port.rollout.f32"][:, :, :len(names), ..., 0].permute(1, 3, 4, 0, 2).double()
    for dtype in (torch.float64, torch.float32):
        with torch.no_grad():
            y = model.to(dtype).rollout(x.to(dtype), steps=r["steps"])
        assert close(y, want, 2e-5), dtype

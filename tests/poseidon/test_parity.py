"""opzoo's Poseidon against camlab-ethz/poseidon's own scOT at tag v1-paper with transformers 4.29.2 (the code and
versions that trained the weights), recorded in its own process by tests/poseidon/record_reference.py: the recorded
checkpoint (upstream's save_pretrained: config.json and a pickled pytorch_model.bin) goes through opzoo's converter
(weights_only), and opzoo's network must give upstream's predictions at 128x128 and through the Fourier resampling at
64x64 and 256x256, at several lead times; main (ba06215 and later) must compute what v1-paper computes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import opzoo
from opzoo_poseidon.converter import convert_poseidon
from opzoo_poseidon.network import CosineSelfAttention, position_table

from ..recording import assert_same_outputs, rerun_recording

DATA = Path(__file__).parent / "data"
RECORDED = load_file(str(DATA / "reference.safetensors"))
META = json.loads((DATA / "reference.json").read_text())
CASES = list(META["cases"])


def network(dtype=torch.float64, recorded_tables: bool = True):
    """opzoo's network holding the recorded checkpoint; with ``recorded_tables`` the offset tables upstream computed
    in float32 on the recording machine (a float64 comparison inherits their rounding, which may differ between CPUs
    in the last bit; opzoo's own tables are checked against them separately)."""
    converted = convert_poseidon(DATA / "scot-small")
    model = opzoo.create_model("poseidon", **converted.model_args)
    model.load_state_dict(converted.state_dict, strict=True)
    if recorded_tables:
        for module in model.modules():
            if isinstance(module, CosineSelfAttention):
                module.relative_coords_table.copy_(RECORDED[f"table.{module.window}"])
    return model.to(dtype).eval()


def test_the_recording_is_upstreams_at_v1_paper_with_transformers_4_29_2():
    assert META["commit"] == "2cc8c85" and META["transformers"] == "4.29.2"
    assert json.loads((DATA / "reference-main.json").read_text())["commit"].startswith("b8fa28f")


def test_the_converter_reads_save_pretrained_files_without_unpickling():
    converted = convert_poseidon(DATA / "scot-small")  # the pickled pytorch_model.bin, through weights_only
    assert converted.model_args["embed_dim"] == 8 and converted.model_args["depths"] == (2, 2, 2, 2)
    assert all(k.startswith("net.") for k in converted.state_dict) and converted.preset is None


def test_the_offset_tables_are_upstreams_within_one_float32_step():
    for key, want in RECORDED.items():
        if key.startswith("table."):
            got = position_table(int(key.split(".")[1]))
            assert got.shape == want.shape
            assert ((got - want).abs() <= 1.2e-7 * want.abs().clamp_min(1e-30)).all(), key


@pytest.mark.parametrize("case", CASES)
def test_the_network_is_upstreams_in_float64_and_in_float32_within_its_own_rounding(case):
    """float64 to 1e-12; float32 against upstream's float32 within 4x the larger of each side's own float32-vs-float64
    rounding (the same operations; opzoo's order differs only where it reshapes), 1e-6 floor."""
    x, t = RECORDED[f"{case}.x"], RECORDED[f"{case}.t"]
    with torch.no_grad():
        y64 = network().net(x.double(), t)
        y32 = network(torch.float32, recorded_tables=False).net(x.float(), t.float()).double()
    truth, theirs = RECORDED[f"{case}.output64"], RECORDED[f"{case}.output32"].double()
    assert y64.shape == truth.shape
    assert (y64 - truth).abs().max().item() <= 1e-12 * max(1.0, truth.abs().max().item())
    own, upstream_own = (y32 - y64).abs().max().item(), (theirs - truth).abs().max().item()
    assert (y32 - theirs).abs().max().item() <= max(4 * own, 4 * upstream_own, 1e-6)
    assert own <= 1e-4 * max(1.0, truth.abs().max().item())


def test_main_computes_what_v1_paper_computes():
    """camlab-ethz/poseidon main (b8fa28f, after ba06215's caches and 6c9b24e's init rule) on the same weights and
    inputs: the same float64 outputs."""
    main = load_file(str(DATA / "reference-main.safetensors"))
    for case in CASES:
        a, b = main[f"{case}.output64"], RECORDED[f"{case}.output64"]
        assert (a - b).abs().max().item() <= 1e-12 * max(1.0, b.abs().max().item()), case


def test_the_wrapper_takes_physical_fields_and_lead_times():
    """``[B, n, n, 1, C]`` through the wrapper is the network on the standardized ``[B, C, n, n]``, brought back;
    ``T_out`` frames are the lead times ``k * lead_time``, each from the input; ``lead_time`` overrides per call."""
    x = RECORDED["n64.x"].double()
    mean, std = (0.5, -1.0), (2.0, 0.25)
    model = network()
    physical = opzoo.create_model("poseidon", **{**model.config.to_dict(), "field_mean": mean, "field_std": std,
                                                 "out_timesteps": 3, "lead_time": 0.2})
    physical.load_state_dict(model.state_dict())
    physical = physical.double().eval()
    m, s = torch.tensor(mean).view(1, 2, 1, 1).double(), torch.tensor(std).view(1, 2, 1, 1).double()
    fields = x * s + m  # physical fields whose standardized form is x
    with torch.no_grad():
        y = physical(fields.permute(0, 2, 3, 1).unsqueeze(3))
        for k in (1, 2, 3):
            want = model.net(x, torch.full((2,), 0.2 * k, dtype=torch.float64)) * s + m
            assert torch.allclose(y[:, :, :, k - 1], want.permute(0, 2, 3, 1), rtol=0, atol=1e-10)
        once = physical(fields.permute(0, 2, 3, 1).unsqueeze(3), lead_time=RECORDED["n64.t"])
        want = model.net(x, RECORDED["n64.t"]) * s + m  # the recorded lead times, given per sample
        assert torch.allclose(once[:, :, :, 0], want.permute(0, 2, 3, 1), rtol=0, atol=1e-10)


@pytest.mark.slow
def test_upstream_live_gives_the_recording(tmp_path):
    """Reruns tests/poseidon/record_reference.py against the checkout in $OPZOO_POSEIDON_REPO with transformers 4.29.2
    (`make poseidon-reference`), in its own process."""
    rerun_recording(Path(__file__).with_name("record_reference.py"), tmp_path, "OPZOO_POSEIDON_REPO",
                    "camlab-ethz/poseidon at v1-paper", Path(sys.prefix) / "reference" / "poseidon-transformers-4.29.2",
                    timeout=900)
    assert_same_outputs(load_file(str(tmp_path / "reference.safetensors")), RECORDED)

"""GPhyT on files laid out like The Well's rayleigh_benard, euler_multi_quadrants and shear_flow: opzoo's fit reads
each as upstream's preprocess.py rewrote it for training (density := buoyancy; velocity := momentum / density; the
grid transposed and the velocity components swapped; absent fields zero) and z-scores it as upstream's stats.yaml
did, so that the network input equals upstream's (recorded by tests/gphyt/record_training_sets.py, in its own process,
from upstream's own code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import opzoo
from opzoo.evaluation.fit import fit_data, open_trajectories

from ..recording import rerun_recording
from . import training_set_files as files

RECORDED = json.loads((Path(__file__).parent / "data" / "training_sets.json").read_text())
# a narrow GPhyT at the published shapes: 5 fields, 4 frames at 256 x 128, patches 1 x 16 x 16
NARROW = {"hidden_dim": 16, "mlp_dim": 16, "num_heads": 2, "num_layers": 1}


def network_input(name: str, tmp_path: Path):
    """opzoo's fit of the file to GPhyT, and the network's input for the recorded window."""
    path = files.write(tmp_path / f"{name}.hdf5", name)
    model = opzoo.create_model("gphyt", **NARROW).eval()
    src = open_trajectories(str(path))
    fitted = fit_data(model, [src], stats_from=[src])  # upstream's statistics are over its whole training files
    w = RECORDED["window"]
    frames, mask = src.frames(w["trajectory"], fitted.frame_shape, w["start"], w["start"] + w["frames"])
    with torch.no_grad():
        x, _ = fitted.model._frames(frames[None].double())
    return fitted, x[0], mask


@pytest.mark.parametrize("name", list(files.LAYOUTS))
def test_the_network_input_equals_upstreams_preprocessed_and_normalized_one(name, tmp_path):
    rec = RECORDED["datasets"][name]
    fitted, x, mask = network_input(name, tmp_path)
    assert list(x.shape) == rec["shape"]
    got = torch.tensor([float(x[tuple(p)]) for p in rec["positions"]], dtype=torch.float64)
    want = torch.tensor(rec["values"], dtype=torch.float64)
    # both sides compute in float32 from the same float32 file; the statistics in float64 (summed in another order)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.mean(dim=(0, 1, 2)), torch.tensor(rec["channel_mean"], dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)
    # the statistics the fit computed are upstream's stats.yaml, field by field
    norm = fitted.record["normalization"]
    stats = {f: (m, s) for f, m, s in zip(norm["fields"], norm["mean"], norm["std"])}
    for field in ("pressure", "density", "temperature"):
        mean, std = rec["stats"]["mean"][field], rec["stats"]["std"][field]
        assert stats[field][0] == pytest.approx(mean, abs=1e-9)
        assert stats[field][1] == pytest.approx(max(std, 1e-4), rel=1e-7)  # upstream clips at min_std when it reads
    for i, axis in enumerate("xy"):
        assert stats[f"velocity_{axis}"][0] == pytest.approx(rec["stats"]["mean"]["velocity"][i], abs=1e-9)
        assert stats[f"velocity_{axis}"][1] == pytest.approx(rec["stats"]["std"]["velocity"][i], rel=1e-7)


def test_the_fit_says_how_each_file_was_read_and_leaves_absent_fields_out_of_the_scores(tmp_path):
    fitted, _, mask = network_input("shear_flow", tmp_path)
    text = "\n".join(fitted.lines)
    assert "read as GPhyT's upstream read its training set shear_flow (the file names itself 'shear_flow'" in text
    assert "grid transposed (H <-> W); velocity_x := velocity_y; velocity_y := velocity_x" in text
    assert "fields: density, temperature absent: read as 0" in text and "not read: tracer" in text
    assert "grid: 256x128, the data's own" in text  # 128 x 256 as stored, transposed
    assert mask.tolist() == [True, False, False, True, True]
    rb, _, _ = network_input("rayleigh_benard", tmp_path)
    assert "density := buoyancy" in "\n".join(rb.lines) and "not read" not in "\n".join(rb.lines)
    euler, _, _ = network_input("euler_multi_quadrants_periodicBC", tmp_path)
    assert "velocity_x := momentum_x / density" in "\n".join(euler.lines)
    assert "not read: energy" in "\n".join(euler.lines)


def test_training_set_none_reads_the_file_by_name(tmp_path):
    path = files.write(tmp_path / "rb.hdf5", "rayleigh_benard")
    model = opzoo.create_model("gphyt", **NARROW)
    src = open_trajectories(str(path))
    fitted = fit_data(model, [src], training_set="none", stats_from=[src])
    assert src.present == [True, False, False, True, True]  # no density: buoyancy is not read as one
    assert not any("upstream read its training set" in line for line in fitted.lines)
    with pytest.raises(opzoo.ConfigError, match="is none of the training sets the gphyt contract knows"):
        fit_data(model, [open_trajectories(str(path))], training_set="not-a-set")


@pytest.mark.slow
def test_upstream_live_gives_the_recording(tmp_path):
    """Reruns tests/gphyt/record_training_sets.py against the checkout in $OPZOO_GPHYT_REPO, in its own process."""
    rerun_recording(Path(__file__).with_name("record_training_sets.py"), tmp_path, "OPZOO_GPHYT_REPO",
                    "FloWsnr/General-Physics-Transformer at 4374116")
    live = json.loads((tmp_path / "training_sets.json").read_text())
    for name, rec in RECORDED["datasets"].items():
        torch.testing.assert_close(torch.tensor(live["datasets"][name]["values"]), torch.tensor(rec["values"]),
                                   rtol=1e-6, atol=1e-6)

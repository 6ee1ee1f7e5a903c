"""Poseidon's data contract: a compressible file in physical units reaches the network as upstream's data pipeline
feeds it (each set's mean pressure subtracted before the pretraining constants; recorded from upstream's own code by
tests/poseidon/record_compressible.py, in its own process), a file that is none of its sets has its pressure's mean
from its training split (said), and absent fields are filled as upstream's incompressible sets were."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import opzoo
from opzoo.evaluation.fit import fit_data, open_trajectories

from ..recording import rerun_recording
from .record_compressible import DATASETS, write

RECORDED = json.loads((Path(__file__).parent / "data" / "compressible.json").read_text())
NARROW = {"embed_dim": 8, "depths": (1, 1, 1, 1), "num_heads": (1, 2, 2, 4)}
NAMES = "c0=density,c1=velocity_x,c2=velocity_y,c3=pressure"  # upstream's files name no channel


def fitted_input(path: Path, training_set: str | None = None):
    model = opzoo.load("poseidon-t", **NARROW).eval()  # the preset's constants and contract, narrow
    src = open_trajectories(str(path), "canonical:NTCXY")
    fitted = fit_data(model, [src], field_map=NAMES, training_set=training_set, stats_from=[src])
    pair = RECORDED["pair"]
    frames, _ = src.frames(pair["trajectory"], fitted.frame_shape, pair["t1"], pair["t1"] + 1)
    with torch.no_grad():
        x = fitted.model._frame(frames[None].double())[0]  # [C, H, W]: what the network reads
    return fitted, x


@pytest.mark.parametrize("name", list(DATASETS))
def test_a_compressible_file_in_physical_units_reaches_the_network_as_upstreams_pipeline_feeds_it(name, tmp_path):
    rec = RECORDED["datasets"][name]
    path = write(tmp_path / f"{name}.nc", seed=list(DATASETS).index(name))
    fitted, x = fitted_input(path, training_set=name)
    got = torch.tensor([float(x[tuple(p)]) for p in rec["positions"]], dtype=torch.float64)
    torch.testing.assert_close(got, torch.tensor(rec["values"], dtype=torch.float64), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.mean(dim=(1, 2)), torch.tensor(rec["channel_mean"], dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)
    text = "\n".join(fitted.lines)
    assert f"pressure's normalization mean {rec['mean_pressure']:g}" in text
    assert f"normalization: pressure: mean [{rec['mean_pressure']:.4g}], std [0.185] ({name}'s mean" in text


def test_a_compressible_file_of_no_known_set_takes_its_training_splits_mean_pressure(tmp_path):
    path = write(tmp_path / "mine.nc", seed=7)
    fitted, x = fitted_input(path)
    pressure = open_trajectories(str(path), "canonical:NTCXY").source.read(0)[..., 3]  # [H, W, T]
    all_p = np.concatenate([open_trajectories(str(path), "canonical:NTCXY").source.read(i)[..., 3].ravel()
                            for i in range(2)]).astype(np.float64)
    mean = fitted.record["normalization"]["mean"][3]
    assert mean == pytest.approx(all_p.mean(), rel=1e-9)
    assert "as upstream took pressure's per dataset" in "\n".join(fitted.lines)
    want = (torch.from_numpy(pressure[..., 0].astype(np.float64)) - mean) / 0.185
    torch.testing.assert_close(x[3], want.to(x.dtype), rtol=1e-5, atol=1e-5)
    # without the subtraction, physical pressure would enter many stds off (about 2.5 / 0.185 = 13.5)
    assert abs(float(x[3].mean())) < 1.0


def test_incompressible_velocity_files_get_density_one_and_pressure_zero_as_upstreams_sets(tmp_path):
    import h5py

    with h5py.File(tmp_path / "ns.h5", "w") as f:
        f.create_dataset("data", data=np.random.default_rng(0).standard_normal((3, 16, 16, 4, 2)).astype(np.float32))
        f.attrs["fields"] = ["u", "v"]
    model = opzoo.load("poseidon-t", **NARROW).eval()
    src = open_trajectories(str(tmp_path / "ns.h5"))
    fitted = fit_data(model, [src], field_map="u=velocity_x,v=velocity_y")
    assert src.present == [False, True, True, False]
    assert (src.read(0)[..., 0] == 1.0).all() and (src.read(0)[..., 3] == 0.0).all()
    assert "density, pressure absent: read as density as 1, pressure as 0 (as upstream read its incompressible" \
           in "\n".join(fitted.lines)


@pytest.mark.slow
def test_upstream_live_gives_the_recording(tmp_path):
    """Reruns tests/poseidon/record_compressible.py against $OPZOO_POSEIDON_REPO, in its own process."""
    rerun_recording(Path(__file__).with_name("record_compressible.py"), tmp_path, "OPZOO_POSEIDON_REPO",
                    "camlab-ethz/poseidon at v1-paper", Path(sys.prefix) / "reference" / "poseidon-transformers-4.29.2")
    live = json.loads((tmp_path / "compressible.json").read_text())
    for name, rec in RECORDED["datasets"].items():
        torch.testing.assert_close(torch.tensor(live["datasets"][name]["values"]), torch.tensor(rec["values"]))

"""The defects the data contract fixed where a user's data meets a model (issue 56): one persistence in every
command, a NaN row that fails validate, the padded channel recorded and refilled, and messages that are one line with
their way forward."""

from __future__ import annotations

import json
import warnings

import h5py
import numpy as np
import pytest
import torch

import opzoo
from opzoo.cli import main
from opzoo.data import write_canonical


def advection(n: int, shape: tuple[int, ...], steps: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, *shape, 1, channels)).astype(np.float32)
    return np.concatenate([np.roll(base, t, axis=1) for t in range(steps)], axis=-2)


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """dpot-micro (2 channels) fine-tuned 2 steps on a 1-field 40 x 56 file: its grid is 32 x 32, so a persistence made
    through the model's grid would differ from one at the file's."""
    root = tmp_path_factory.mktemp("contract")
    data = write_canonical(root / "wave.h5", advection(6, (40, 56), 14), ["u"], pde="wave") or root / "wave.h5"
    assert main(["finetune", "dpot-micro", "--data", str(data), "--out", str(root / "run"), "--steps", "2",
                 "--batch-size", "2", "--test-fraction", "0.34", "--set", "evaluation.plots=false"]) == 0
    return root, root / "wave.h5", root / "run"


def test_finetune_and_eval_give_one_persistence_on_one_split(finetuned, capsys):
    root, data, run = finetuned
    trained = json.loads(sorted((run / "eval").glob("step-*.json"))[-1].read_text())["datasets"]["wave"]
    assert main(["eval", str(run / "model"), "--data", str(data), "--out", str(root / "e")]) == 0
    scored = json.loads((root / "e" / "eval.json").read_text())["datasets"]["wave"]
    assert scored["n_trajectories"] == trained["n_trajectories"] == 2  # the held-out split the run records
    assert scored["persistence"]["l2_full"] == trained["persistence"]["l2_full"]
    assert scored["persistence"]["short_horizons"] == trained["persistence"]["short_horizons"]
    assert trained["grid"] == [40, 56] and trained["model_grid"] == [32, 32]


def test_the_padded_channel_is_recorded_and_refilled_in_a_rollout(finetuned, monkeypatch):
    root, data, run = finetuned
    saved = json.loads((run / "model" / "config.json").read_text())["pretrained_cfg"]
    assert saved["fields"] == ["u", "<pad>"] and saved["channels"] == 2
    assert any("padded with 1" in line and "refilled with 1 in a rollout" in line for line in saved["data_fit"])
    card = (run / "model" / "README.md").read_text()
    assert "## How the data was fitted to the model" in card and str(root) not in card
    model = opzoo.load(str(run / "model"))
    seen = []
    forward = type(model).forward

    def spy(self, x, *args, **kwargs):
        seen.append(x[..., 1].clone())
        return forward(self, x, *args, **kwargs)

    monkeypatch.setattr(type(model), "forward", spy)
    x = torch.cat([torch.randn(1, 32, 32, 10, 1), torch.ones(1, 32, 32, 10, 1)], dim=-1)
    with torch.no_grad():
        model.rollout(x, steps=3, channel_mask=torch.tensor([True, False]))
    assert all(torch.equal(s, torch.ones_like(s)) for s in seen)  # every window the model reads holds the ones


def test_validate_fails_a_nan_row_and_exits_1(tmp_path, capsys):
    values = advection(4, (32, 32), 14, channels=2)
    values[1, 3, 3, 5, 0] = np.nan
    with h5py.File(tmp_path / "nan.h5", "w") as f:  # opzoo's writer refuses NaN: a file from elsewhere
        f.create_dataset("data", data=values)
        f.attrs["fields"] = ["a", "b"]
    assert main(["validate", "dpot-micro", "--data", str(tmp_path / "nan.h5"), "--out", str(tmp_path / "v.csv")]) == 1
    out = capsys.readouterr().out
    assert "failed: dpot-micro on" in out and "non-finite data" in out and "trajectory 1" in out
    row = (tmp_path / "v.csv").read_text().splitlines()[1]
    assert ",failed," in row and "nan" not in row.split(",failed,")[1].split(",")[0]


def test_the_headline_says_when_the_model_is_worse_than_persistence_there():
    from opzoo.evaluation.rollouts import DatasetResult, headline

    base = DatasetResult("x", 0.95, [0.3, 0.5], 2, 10, short_horizons={1: 0.3, 5: 0.85})
    r = DatasetResult("x", 0.9, [0.4, 0.6], 2, 10, short_horizons={1: 0.4, 5: 0.95}, persistence=base)
    what, _, _, note = headline(r)
    assert what == "horizon 1" and "worse than persistence (0.4 against 0.3)" in note


def test_plots_without_labelled_lines_warn_nothing(tmp_path):
    from opzoo.evaluation.plots import plot_error_curves

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_error_curves({}, tmp_path / "e.png")


def test_array_and_hdf5_metadata_are_read_not_ignored(tmp_path, capsys):
    np.savez(tmp_path / "gs.npz", u=advection(3, (16, 16), 5, channels=2), F=np.float32(0.04), k=np.float32(0.06))
    assert main(["data", "inspect", str(tmp_path / "gs.npz"), "--layout", "array:NXYTC"]) == 0
    assert "params:   {'F': 0.04, 'k': 0.06}" in capsys.readouterr().out
    with h5py.File(tmp_path / "d.h5", "w") as f:  # fields and boundary said on the dataset, not the root
        ds = f.create_dataset("data", data=advection(3, (16, 16), 5))
        ds.attrs["fields"], ds.attrs["boundary"] = ["u"], "dirichlet"
    assert main(["data", "inspect", str(tmp_path / "d.h5")]) == 0
    out = capsys.readouterr().out
    assert "fields:   u" in out and "boundary: dirichlet" in out


@pytest.mark.parametrize("suffix", [".npy", ".h5"])
def test_an_empty_file_says_so_in_one_line(tmp_path, capsys, suffix):
    (tmp_path / f"empty{suffix}").write_bytes(b"")
    assert main(["eval", "dpot-micro", "--data", str(tmp_path / f"empty{suffix}"), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("empty file (0 bytes)" in err or "not HDF5" in err)
    (tmp_path / "empty.pth").write_bytes(b"")
    assert main(["convert", "morph", str(tmp_path / "empty.pth"), str(tmp_path / "out")]) == 2
    assert "an empty file (0 bytes), not a checkpoint; download or copy it again" in capsys.readouterr().err


def test_offline_weights_name_the_command_line_routes(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(opzoo.HubError) as e:
        opzoo.load("gphyt-s", pretrained=True)
    text = str(e.value)
    assert "\n" not in text and "opzoo convert gphyt FILE OUT" in text and "--no-pretrained" in text


def test_a_directory_overlay_on_a_repos_subfolder_names_the_parent(tmp_path):
    sub = tmp_path / "tree" / "mc-s"
    sub.mkdir(parents=True)
    (sub / "diffusion_pytorch_model.safetensors").write_bytes(b"x")
    with pytest.raises(opzoo.HubError, match=r"is the subfolder 'mc-s' of the repo: name the directory that holds it"):
        opzoo.load("pdet-mc-s", pretrained=True, pretrained_cfg_overlay={"directory": str(sub)})


def test_validate_explains_its_paired_column(tmp_path, capsys):
    write_canonical(tmp_path / "a.h5", advection(4, (32, 32), 14, channels=2), ["a", "b"], pde="a")
    assert main(["validate", "dpot-micro", "aot-pot-micro", "--data", str(tmp_path / "a.h5"), "--out",
                 str(tmp_path / "v.csv"), "--horizon", "2"]) == 0
    assert "nRMSE_minus_first: a row's nRMSE minus the first model's" in capsys.readouterr().out


def test_a_field_map_reads_a_files_names_as_the_models(tmp_path, capsys):
    """GPhyT's fields by another name: --field-map reads them, the rest filled as trained, said in the block."""
    write_canonical(tmp_path / "uv.h5", advection(3, (32, 16), 6, channels=2), ["u", "v"], pde="uv")
    assert main(["fit", "gphyt-s", "--no-pretrained", "--data", str(tmp_path / "uv.h5"), "--field-map",
                 "u=velocity_x,v=velocity_y"]) == 0
    out = capsys.readouterr().out
    assert "fields: velocity_x, velocity_y from the file (--field-map: u as velocity_x, v as velocity_y)" in out
    assert "fields: pressure, density, temperature absent: read as 0" in out
    assert main(["fit", "gphyt-s", "--no-pretrained", "--data", str(tmp_path / "uv.h5"), "--field-map", "w=x"]) == 2
    assert "--field-map names w, which the file does not have (it has u, v)" in capsys.readouterr().err

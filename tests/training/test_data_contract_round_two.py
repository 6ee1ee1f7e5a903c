"""The data contract, round two (issue 74): saved outputs in the user's orientation and field order, a field map that
cannot drop a file's own field, and the fit's other refusals and messages, tried as a user would."""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from safetensors import safe_open

import opzoo
from opzoo.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def named_file(tmp_path_factory) -> Path:
    """A canonical file on a non-square 32 x 48 grid with named fields (u, v), 12 frames."""
    path = tmp_path_factory.mktemp("contract2") / "named.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["data"] = (1.0 + 0.1 * rng.standard_normal((4, 32, 48, 12, 2))).astype(np.float32)
        f.attrs["fields"] = ["u", "v"]
    return path


def saved(path: Path) -> tuple[torch.Tensor, dict]:
    with safe_open(str(path), "pt") as f:
        return f.get_tensor("prediction"), f.metadata()


@pytest.mark.parametrize("preset", ["dpot-micro", "aot-pot-micro", "poseidon-micro", "gphyt-micro", "morph-micro",
                                    "pdet-mc-micro", "fno-2d"])
def test_a_saved_rollout_is_in_the_files_orientation_and_field_order(preset, named_file, tmp_path):
    """Every family's micro model (FNO: a 2-field one), on a non-square file of named fields (morph-micro's position
    table takes no 32 x 48 patch grid: it runs at 24 x 36, resampled, and saves at the file's grid)."""
    if preset == "fno-2d":
        opzoo.load("fno-2d", in_channels=2, out_channels=2, width=8, modes=4).save_pretrained(tmp_path / "fno")
        preset = str(tmp_path / "fno")
    out = tmp_path / "pred.safetensors"
    assert main(["rollout", preset, "--data", str(named_file), "--steps", "2", "--save", str(out)]) == 0
    pred, meta = saved(out)
    assert tuple(pred.shape) == (32, 48, 2, 2) and meta["grid"] == "32x48" and meta["channels"] == "u,v"
    assert meta["read_transposed"] == "no"


def test_a_transposed_training_set_is_saved_turned_back_in_the_files_components(tmp_path, capsys):
    """GPhyT reads The Well's shear_flow transposed, its velocity components swapped (upstream's preprocess.py): the
    saved prediction and the plot are the file's 128 x 256, velocity_x the file's velocity_x."""
    sys.path.insert(0, str(ROOT))
    from opzoo.evaluation.fit import fit_files
    from opzoo.evaluation.run import in_file_frame
    from tests.gphyt.training_set_files import write

    path = write(tmp_path / "shear.h5", "shear_flow")
    model = opzoo.load("gphyt-s", hidden_dim=24, num_heads=2, num_layers=1, mlp_dim=48)
    _, _, (src,) = fit_files(model, [str(path)], say=lambda line: None)
    assert src.source.transposed and tuple(src.spatial) == (256, 128)
    (back,), names, left = in_file_frame(src, src.read(1))
    assert names == ["pressure", "velocity_x", "velocity_y"] and left == ["density", "temperature"]
    with h5py.File(path) as f:
        raw = {"pressure": f["t0_fields/pressure"][1], "velocity_x": f["t1_fields/velocity"][1, ..., 0],
               "velocity_y": f["t1_fields/velocity"][1, ..., 1]}  # [T, X, Y]
    for i, n in enumerate(names):  # exactly the file's values, in its orientation
        assert torch.equal(back[..., i], torch.from_numpy(np.moveaxis(raw[n], 0, -1)))
    from opzoo.evaluation.run import rollout_trajectory

    out = tmp_path / "pred.safetensors"
    rollout_trajectory(model, "gphyt-s", str(path), steps=1, save=str(out), plot=str(tmp_path / "p.png"))
    pred, meta = saved(out)
    assert tuple(pred.shape) == (128, 256, 1, 3) and meta["read_transposed"] == "yes"
    assert meta["channels"] == "pressure,velocity_x,velocity_y" and meta["model_channels_not_saved"] == \
        "density,temperature"
    said = capsys.readouterr().out
    assert "the file's own 128x256 grid is read transposed" in said and "the model ran on it transposed" in said


def test_a_field_map_onto_a_field_the_file_has_itself_is_refused(tmp_path, capsys):
    """Issue 74 item 2: --field-map velocity_x=density on a file with its own density dropped the file's density, with
    the false reason that the model has no such field."""
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["data"] = np.ones((3, 16, 16, 6, 3), dtype=np.float32)
        f.attrs["fields"] = ["density", "velocity_x", "pressure"]
    code = main(["fit", "gphyt-s", "--no-pretrained", "--data", str(tmp_path / "f.h5"), "--field-map",
                 "velocity_x=density"])
    err = capsys.readouterr().err
    assert code == 2 and "--field-map velocity_x=density reads velocity_x as gphyt-s's density, but the file has its " \
                         "own density" in err


def test_save_names_a_safetensors_file(named_file, tmp_path, capsys):
    assert main(["rollout", "dpot-micro", "--data", str(named_file), "--steps", "1", "--save",
                 str(tmp_path / "x.npz")]) == 2
    assert "--save" in capsys.readouterr().err and not (tmp_path / "x.npz").exists()


def test_a_canonical_files_fields_may_be_one_comma_separated_string_or_given(tmp_path, capsys):
    """Item 8: the form --fields takes ("u,v") as the file's attribute was refused, and --fields for a canonical file
    too: rewriting the file was the only way forward."""
    from opzoo.data.readers import open_source

    with h5py.File(tmp_path / "comma.h5", "w") as f:
        f["data"] = np.ones((2, 8, 8, 4, 2), dtype=np.float32)
        f.attrs["fields"] = "u, v"
    assert open_source(tmp_path / "comma.h5").fields == ["u", "v"]
    with h5py.File(tmp_path / "unnamed.h5", "w") as f:
        f["data"] = np.ones((2, 8, 8, 4, 2), dtype=np.float32)
    assert open_source(tmp_path / "unnamed.h5", fields=["a", "b"]).fields == ["a", "b"]
    assert main(["data", "inspect", str(tmp_path / "unnamed.h5"), "--fields", "a,b"]) == 0
    assert "a, b" in capsys.readouterr().out
    from opzoo.data.errors import DataFormatError

    with pytest.raises(DataFormatError, match="names its channels itself .* --field-map"):
        open_source(tmp_path / "comma.h5", fields=["a", "b"])


def test_verify_file_names_a_directory_for_what_it_is(tmp_path, capsys):
    assert main(["verify", "mpp-avit-ti", "--file", str(tmp_path)]) == 2
    assert "a directory: name the weights file in it" in capsys.readouterr().err


def test_the_library_rollout_keeps_the_pad_rule_of_a_models_record():
    """Item 18: Backbone.rollout fed a padded channel back as predicted, where every command (and upstream's
    mixed-channel rollout) refills it: the rule is now the model's, read from its record's <pad> fields."""
    from opzoo.registry.contract import PAD

    model = opzoo.load("pdet-mc-micro", pretrained=True)
    torch.manual_seed(0)
    x = torch.randn(1, 32, 32, model.config.in_timesteps, model.config.in_channels)
    x[..., 1] = 0.0  # the padded channel holds its pad value
    with torch.no_grad():
        told = model.rollout(x, 4, channel_mask=torch.tensor([True, False]))
        untold = model.rollout(x, 4)
        model.pretrained_cfg = {**model.pretrained_cfg, "fields": ["u", PAD]}  # as a fine-tune on one field saves it
        recorded = model.rollout(x, 4)
    assert torch.equal(recorded, told) and not torch.equal(untold, told)


def test_the_library_says_when_adaptation_drops_the_normalization_and_takes_it_as_an_argument():
    """Item 4: load(poseidon, pretrained=True, in_channels=1) dropped the normalization constants, said only in an
    INFO log; the command line computes the new field's statistics, the library could not."""
    with pytest.warns(UserWarning, match=r"its field_mean, field_std were those of its 2 pretrained fields and are "
                                         r"dropped.*field_mean=\[\.\.\.\]"):
        dropped = opzoo.load("poseidon-micro", pretrained=True, in_channels=1, out_channels=1)
    assert dropped.config.field_mean is None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        given = opzoo.load("poseidon-micro", pretrained=True, in_channels=1, out_channels=1, field_mean=[0.5],
                           field_std=[2.0])
    assert tuple(given.config.field_mean) == (0.5,) and tuple(given.config.field_std) == (2.0,)


def test_a_new_field_starts_as_the_fit_block_says_not_through_anothers_weights(tmp_path):
    """Item 3: adapted to a file holding u, GPhyT read u through pressure's tokenizer and detokenizer weights (copied by
    position) while the block said "new input channels start at zero". Now a new field starts as the block says, and
    a field the model knew keeps its own weights wherever it sits in the file."""
    from opzoo.evaluation.fit import fit_data, open_trajectories

    with h5py.File(tmp_path / "u.h5", "w") as f:
        f["data"] = np.random.default_rng(0).normal(size=(4, 32, 32, 8, 1)).astype(np.float32)
        f.attrs["fields"] = ["u"]
    model = opzoo.load("gphyt-s", hidden_dim=24, num_heads=2, num_layers=1, mlp_dim=48)
    fitted = fit_data(model, [open_trajectories(str(tmp_path / "u.h5"))], train=True)
    adapted = fitted.model
    assert not torch.count_nonzero(adapted.net.tokenize.weight)  # u's input weights, in all four groups: zero
    assert not torch.equal(adapted.net.detokenize.weight[:, 0], model.net.detokenize.weight[:, 0])  # not pressure's
    line = next(x for x in fitted.lines if x.startswith("channels: u is new"))
    assert "in net.tokenize.weight their slices start at zero" in line and "freshly initialized" in line
    # a field it knows keeps its own weights by name, though the file has it second
    from opzoo.model_io.adapt import adapt_model

    kept = adapt_model(model, in_channels=2, out_channels=2, channel_map=[None, 0])  # [u, pressure]
    for g in range(4):
        assert torch.equal(kept.net.tokenize.weight[:, 2 * g + 1], model.net.tokenize.weight[:, 5 * g])
    assert torch.equal(kept.net.detokenize.weight[:, 1], model.net.detokenize.weight[:, 0])


def test_a_by_position_model_stays_by_position_through_a_chain_of_fine_tunes(named_file, tmp_path, capsys):
    """Item 5: dpot-micro fine-tuned on (u, v) became a model by name: a 1-field file was refused (dpot-micro itself
    pads), and one fine-tuned on (u, <pad>) read only u of a (u, v) file ("not read: v")."""
    from opzoo.evaluation.fit import fit_data, open_trajectories

    with h5py.File(tmp_path / "w.h5", "w") as f:
        f["data"] = (1 + 0.1 * np.random.default_rng(1).normal(size=(6, 32, 48, 12, 1))).astype(np.float32)
        f.attrs["fields"] = ["w"]
    run = ["--steps", "2", "--batch-size", "2", "--set", "evaluation.plots=false"]
    assert main(["finetune", "dpot-micro", "--data", str(named_file), "--out", str(tmp_path / "uv"), *run]) == 0
    fine = opzoo.load(str(tmp_path / "uv" / "model"))
    assert fine.pretrained_cfg["fields"] == ["u", "v"]  # what its channels held: a record, not names to match
    lines = fit_data(fine, [open_trajectories(str(tmp_path / "w.h5"))]).lines
    assert any("by position" in x for x in lines) and any("padded" in x for x in lines)
    assert main(["finetune", "dpot-micro", "--data", str(tmp_path / "w.h5"), "--out", str(tmp_path / "w"), *run]) == 0
    padded = opzoo.load(str(tmp_path / "w" / "model"))
    assert padded.pretrained_cfg["fields"] == ["w", "<pad>"]
    lines = fit_data(padded, [open_trajectories(str(named_file))]).lines
    assert not any("not read" in x for x in lines) and any("the file's u, v as channels 0-1" in x for x in lines)


def test_the_cards_model_index_names_the_fine_tune_not_its_base(named_file, tmp_path):
    """Item 6: every fine-tune's results were filed under ``dpot-micro``, in a chain too."""
    import yaml

    def index_name(folder: Path) -> str:
        front = (folder / "README.md").read_text().split("---")[1]
        return yaml.safe_load(front)["model-index"][0]["name"]

    run = ["--steps", "2", "--batch-size", "2", "--set", "evaluation.plots=false"]
    assert main(["finetune", "dpot-micro", "--data", str(named_file), "--out", str(tmp_path / "a"), *run]) == 0
    assert index_name(tmp_path / "a" / "model") == "dpot-micro fine-tuned on named.h5"
    chained = tmp_path / "a" / "model"
    assert main(["finetune", str(chained), "--data", str(named_file), "--out", str(tmp_path / "b"), *run]) == 0
    assert index_name(tmp_path / "b" / "model") == "a fine-tuned on named.h5"  # the run it started from

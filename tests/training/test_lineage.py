"""What a model saw, per trajectory and through a chain of fine-tunes (issues 45 and 49): a trajectory the model or an
ancestor trained on is recognised by its content wherever it lies (another file, a cut-out, a gzip'd or float64 copy)
and never scored or labelled as held-out; a fine-tune carries its base's record and leaves what its base trained on out
of its own test split."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import opzoo
from opzoo.cli import main

from .conftest import advection_trajectories, write_canonical


def fine_tune(base: str, data, out, test_fraction: float = 0.25):
    from opzoo.training import Trainer, finetune_config

    cfg = finetune_config(base, [str(data)], str(out), steps=1, batch_size=2, test_fraction=test_fraction,
                          overrides={"evaluation.plots": False})
    Trainer(cfg, show_progress=False).fit()
    return out / "model"


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """dpot-micro fine-tuned on F (trajectories 0-5 trained, 6-7 held out), then that model fine-tuned on G."""
    root = tmp_path_factory.mktemp("lineage")
    f = write_canonical(root / "F.h5", advection_trajectories(8, 32, 14, seed=3), ["a", "b"], "advection")
    g = write_canonical(root / "G.h5", advection_trajectories(8, 32, 14, seed=4), ["a", "b"], "advection")
    first = fine_tune("dpot-micro", f, root / "run1")
    second = fine_tune(str(first), g, root / "run2")
    return root, f, g, first, second


def scored(capsys, *argv):
    code = main(["eval", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_chained_fine_tune_carries_its_bases_record(chain, capsys):
    """A model fine-tuned from a fine-tuned model recorded only its own files; its scores on the base's training file
    then included trajectories the base trained on, with no warning."""
    root, f, g, first, second = chain
    record = json.loads((second / "config.json").read_text())["pretrained_cfg"]["training_data"]
    assert [(r["file"], r.get("by")) for r in record] == [("G.h5", None), ("F.h5", "dpot-micro")]
    assert record[1]["train"] == [0, 5] and len(record[1]["train_hashes"]) == 6
    code, out, _ = scored(capsys, str(second), "--data", str(f), "--out", str(root / "e1"))
    assert code == 0 and "without trajectories 0-5 trained on by dpot-micro" in out
    assert json.loads((root / "e1" / "eval.json").read_text())["datasets"]["F"]["n_trajectories"] == 2
    card = (second / "README.md").read_text()
    assert "base_model: dpot-micro\n" in card  # not a folder's name


def test_the_same_trajectories_in_another_file_are_recognised(chain, tmp_path, capsys):
    """The 6 training trajectories cut out into a new file, or the whole file gzip'd in float64, were scored as
    unseen."""
    root, f, g, first, second = chain
    with h5py.File(f) as src:
        data = src["data"][()]
    cut = write_canonical(tmp_path / "cut.h5", data[:6], ["a", "b"], "advection")
    code, _, err = scored(capsys, str(first), "--data", str(cut), "--out", str(tmp_path / "a"))
    assert code == 2 and "was trained on by this model" in err and "--include-training" in err
    code, out, _ = scored(capsys, str(first), "--data", str(cut), "--include-training", "--out", str(tmp_path / "b"))
    assert code == 0 and "6 of them SEEN IN TRAINING" in out
    with h5py.File(tmp_path / "copy.h5", "w") as out_file:  # another encoding of the same values
        out_file.create_dataset("data", data=data.astype(np.float64), compression="gzip")
        out_file.attrs["fields"] = ["a", "b"]
    code, out, _ = scored(capsys, str(first), "--data", str(tmp_path / "copy.h5"), "--out", str(tmp_path / "c"))
    assert code == 0 and "without trajectories 0-5 trained on by this model" in out
    changed = data.copy()
    changed[0, 3, 3, 3, 0] += 1e-3  # one value of one trajectory: no longer the same trajectory
    write_canonical(tmp_path / "edited.h5", changed[:1], ["a", "b"], "advection")
    code, out, _ = scored(capsys, str(first), "--data", str(tmp_path / "edited.h5"), "--out", str(tmp_path / "d"))
    assert code == 0 and "SEEN" not in out and "without" not in out


def test_rollout_labels_a_training_trajectory(chain, capsys, tmp_path):
    root, f, g, first, second = chain
    assert main(["rollout", str(second), "--data", str(f), "--index", "2", "--steps", "2",
                 "--save", str(tmp_path / "p.safetensors")]) == 0
    assert "SEEN IN TRAINING (by dpot-micro)" in capsys.readouterr().out
    assert main(["rollout", str(second), "--data", str(f), "--index", "7", "--steps", "2"]) == 0
    assert "SEEN" not in capsys.readouterr().out


def test_a_fine_tune_on_its_bases_file_holds_out_only_what_the_base_did_not_train_on(chain, tmp_path, caplog):
    """Fine-tuning a model on its own pretraining file with another test fraction labelled trajectories it trained on
    as held-out (issue 49, failed 4)."""
    root, f, g, first, second = chain
    with caplog.at_level("INFO", logger="opzoo"):
        again = fine_tune(str(first), f, tmp_path / "again", test_fraction=0.5)  # test split 4-7: 4 and 5 were trained
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "trajectories 4-5 of the test split were trained on by the base model" in said
    record = json.loads((again / "config.json").read_text())["pretrained_cfg"]["training_data"]
    assert record[0]["test"] == [6, 7] and record[0]["train"] == [0, 3]
    assert opzoo.load(str(again)).pretrained_cfg["training_data"][1]["by"] is not None


def test_info_of_a_trained_model_shows_its_lineage_data_splits_and_scores(chain, capsys):
    """Issue 45: `opzoo info RUN/model` shows the base chain, the data, the splits and the errors."""
    from opzoo.cli import main

    root, f, g, first, second = chain
    assert main(["info", str(second)]) == 0
    out = capsys.readouterr().out
    assert "  lineage:    dpot-micro -> this model" in out
    assert "    G.h5 (" in out and "by this model" in out
    assert "    F.h5 (8 trajectories): trained on 0-5 by dpot-micro (6 hashed), held out 6-7 (2 hashed)" in out
    assert "  scores:" in out and "relative L2 over the whole rollout" in out

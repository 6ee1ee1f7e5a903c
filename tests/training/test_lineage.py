"""What a model saw, per trajectory and through a chain of fine-tunes (issues 45 and 49): a trajectory the model or an
ancestor trained on is recognised by its content wherever it lies (another file, a cut-out, a gzip'd or float64 copy)
and never scored or labelled as held-out; a fine-tune carries its base's record and leaves what its base trained on out
of its own test split."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

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
    micro = [(name, "dpot-micro") for name in ("ns-nu1e-3.h5", "ns-nu1e-4.h5", "diffusion-reaction.h5", "swe.h5")]
    # F was trained on by the intermediate model (run1/model), not by dpot-micro, which never saw it
    assert [(r["file"], r.get("by")) for r in record] == [("G.h5", None), ("F.h5", "run1/model"), *micro]
    assert record[1]["train"] == [0, 5] and len(record[1]["train_hashes"]) == 6
    code, out, _ = scored(capsys, str(second), "--data", str(f), "--out", str(root / "e1"))
    assert code == 0 and "without trajectories 0-5 trained on by run1/model" in out
    assert json.loads((root / "e1" / "eval.json").read_text())["datasets"]["F"]["n_trajectories"] == 2
    card = (second / "README.md").read_text()
    # its parent is a local model with no Hub id: no base_model claims dpot-micro; the body names the lineage
    assert "base_model:" not in card and "`run1/model`, a local model (lineage: dpot-micro -> run1/model)" in card
    first_card = (first / "README.md").read_text()
    assert "base_model: dpot-micro\n" in first_card  # a preset parent is named as such


@pytest.mark.slow
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
    assert "SEEN IN TRAINING (by run1/model)" in capsys.readouterr().out
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
    assert "  lineage:    dpot-micro -> run1/model -> this model" in out
    assert "    G.h5 (" in out and "by this model" in out
    assert "    F.h5 (8 trajectories): trained on 0-5 by run1/model (6 hashed), held out 6-7 (2 hashed)" in out
    assert "  scores:" in out and "relative L2 over the whole rollout" in out


def _micro_ns(path, n: int):
    """The first ``n`` trajectories of dpot-micro's ns-nu1e-3 file, by configs/micro/dpot-micro.yaml's generate spec."""
    from opzoo.training.generate import generate_dataset

    generate_dataset({"kind": "ns", "n": n, "seed": 0, "res": 32, "nu": 1.0e-3, "steps": 20, "record_dt": 0.5}, path,
                     progress=False)
    return path


def test_the_micro_presets_own_data_regenerated_is_recognised(tmp_path, capsys):
    """Degraded: the micro presets' pretraining data, regenerated by its documented command, was called "no training
    on this file". Their records (recorded after training: the shipped eval's held-out errors reproduced on the
    regenerated files) name each file's trajectories and generation recipe. The first 2 trajectories of the recipe are
    trajectories 0-1 of the 120-trajectory training file, which the models trained on: recognised by content here, and
    by the recipe alone where another CPU rounds them differently (one value moved by one float32 step)."""
    small = _micro_ns(tmp_path / "ns-first-2.h5", 2)
    moved = tmp_path / "ns-first-2-rounded-elsewhere.h5"
    moved.write_bytes(small.read_bytes())
    with h5py.File(moved, "r+") as f:
        f["data"][0, 0, 0, 0, 0] = np.nextafter(f["data"][0, 0, 0, 0, 0], np.float32(np.inf), dtype=np.float32)
    for name in ("dpot-micro", "aot-pot-micro"):
        for data in (small, moved):
            code, out, err = scored(capsys, name, "--data", str(data), "--out", str(tmp_path / "e"))
            assert code == 2, out
            assert (f"{data}: every trajectory to score (trajectories 0-1) was trained on by this model (recognised by "
                    "content or generation recipe)") in err, err
    model = opzoo.load("dpot-micro", pretrained=True)
    from opzoo.data import open_source
    from opzoo.evaluation.splits import seen_hashes, seen_in

    src = open_source(moved)
    assert model.pretrained_cfg["training_data"][0]["recipe"]["generator"] == "opzoo.data.generators.ns"
    assert src.trajectory_hash(0) not in seen_hashes(model) and src.trajectory_hash(1) in seen_hashes(model)
    assert seen_in(model, src) == {0: "this model", 1: "this model"}  # trajectory 0 by its recipe alone


@pytest.mark.slow
def test_the_micro_presets_whole_regenerated_file_scores_the_held_out_split(tmp_path, capsys):
    """The whole regenerated file: the held-out split the model records (trajectories 108-119), as the run scored it."""
    data = _micro_ns(tmp_path / "ns-nu1e-3.h5", 120)
    code, out, _ = scored(capsys, "dpot-micro", "--data", str(data), "--out", str(tmp_path / "e"))
    assert code == 0 and "held-out split the model records: trajectories 108-119 of 120" in out, out
    import opzoo_fourier

    shipped = json.loads((Path(opzoo_fourier.__file__).parent / "pretrained/dpot-micro/eval.json").read_text())
    now = json.loads((tmp_path / "e" / "eval.json").read_text())
    np.testing.assert_allclose(now["datasets"]["ns-nu1e-3"]["l2_full_per_trajectory"],
                               shipped["datasets"]["ns-nu1e-3"]["l2_full_per_trajectory"], rtol=1e-4)


def test_a_run_names_the_hub_commit_it_started_from_even_after_the_hub_moved(chain, tmp_path, monkeypatch, capsys):
    """A base read from the Hub says which commit its weights came from ("main" names another file tomorrow); a run
    records it when it starts, and a resume after the Hub moved on (or a plugin shipped new weights) goes on from its
    checkpoint, says the base resolves to other weights now, and its card still names the commit it trained from."""
    import shutil

    from huggingface_hub import constants

    from ..hub_cache import place_in_hf_cache, repo_files

    root, f, _, first, _ = chain
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    old, new = "a" * 40, "b" * 40
    place_in_hf_cache(tmp_path / "hub", "someone/base", repo_files(first), commit=old)
    assert opzoo.load("hf-hub:someone/base").pretrained_cfg["weights_commit"] == old
    run = ["finetune", "hf-hub:someone/base", "--data", str(f), "--out", str(tmp_path / "run"), "--steps", "4",
           "--batch-size", "2", "--test-fraction", "0.25", "--set", "evaluation.plots=false", "checkpoint.every=2"]
    assert main(run) == 0
    recorded = json.loads((tmp_path / "run" / "base_weights.json").read_text())["weights"]
    assert recorded == f"hf-hub:someone/base (a saved opzoo repo), commit {old}"
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())["pretrained_cfg"]
    assert "weights_commit" not in saved  # the base's file, not this model's
    capsys.readouterr()
    (tmp_path / "run" / "finished.json").unlink()  # as if stopped after its checkpoint at step 2
    shutil.rmtree(tmp_path / "run" / "model")
    for ckpt in sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[1:]:
        shutil.rmtree(ckpt)
    place_in_hf_cache(tmp_path / "hub", "someone/base", repo_files(first), commit=new)  # "main" moved on
    assert main(run) == 0
    out = capsys.readouterr().out
    assert "resuming from step 2" in out
    assert (f"the base weights are now hf-hub:someone/base (a saved opzoo repo), commit {new}; this run started from "
            f"{recorded}") in out
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    assert f"commit {old}" in card and new not in card


def test_a_model_loaded_from_the_hub_saves_and_loads_again_with_its_commit(tmp_path, monkeypatch):
    """opzoo's own record of where the weights came from (``weights_commit``) round-trips through save_pretrained
    (issue 72: the save was refused, "unknown field(s) 'weights_commit' for PretrainedCfg")."""
    from huggingface_hub import constants

    from ..hub_cache import place_in_hf_cache, repo_files

    opzoo.load("fno-2d", width=8, modes=2).save_pretrained(tmp_path / "base")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    place_in_hf_cache(tmp_path / "hub", "someone/base", repo_files(tmp_path / "base"), commit="c" * 40)
    model = opzoo.load("hf-hub:someone/base")
    model.save_pretrained(tmp_path / "again")
    again = opzoo.load(str(tmp_path / "again"))
    assert again.pretrained_cfg["weights_commit"] == "c" * 40
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))

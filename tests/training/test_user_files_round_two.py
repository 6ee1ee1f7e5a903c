"""A user's own files, round two (issue 35): eval knows what the model trained on, horizon-aware summaries,
paths compared as files, and every bad argument a one-line error."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import opzoo
from opzoo.cli import main
from opzoo.evaluation.rollouts import DatasetResult, headline

from .conftest import heat_trajectories, write_canonical

RUN = ["--steps", "2", "--batch-size", "2", "--set", "evaluation.plots=false"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """dpot-micro fine-tuned for 2 steps on 8 trajectories of heat, the last 2 held out."""
    root = tmp_path_factory.mktemp("tuned")
    data = write_canonical(root / "heat.h5", heat_trajectories(8, 32, 20, seed=3, nu=0.01), ["T"], "heat")
    assert main(["finetune", "dpot-micro", "--data", str(data), "--out", str(root / "run"), "--test-fraction", "0.25",
                 *RUN]) == 0
    return root, data


def scored(capsys, *argv) -> tuple[int, str, str]:
    code = main(["eval", *argv, "--plot-steps", "1"])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- eval knows the model's data (quiet wrong answer 3) -----------------------------------------------------
@pytest.mark.slow
def test_the_fine_tuned_model_records_its_data_and_eval_scores_only_the_held_out_part(tuned, tmp_path, capsys):
    root, data = tuned
    model = root / "run" / "model"
    record = json.loads((model / "config.json").read_text())["pretrained_cfg"]["training_data"]
    assert [(r["file"], r["by"]) for r in record[1:]] == [  # the base's own record, carried
        (name, "dpot-micro") for name in ("ns-nu1e-3.h5", "ns-nu1e-4.h5", "diffusion-reaction.h5", "swe.h5")]
    record = record[:1]
    hashes = {k: record[0].pop(k) for k in ("train_hashes", "test_hashes")}  # one content hash per trajectory
    assert record == [{"file": "heat.h5", "content_hash": record[0]["content_hash"], "trajectories": 8,
                       "train": [0, 5], "test": [6, 7]}]
    assert [len(v) for v in hashes.values()] == [6, 2] and all(h.startswith("t1:") for v in hashes.values() for h in v)
    assert record[0]["content_hash"].startswith("sha256:") and str(root) not in (model / "README.md").read_text()

    code, out, _ = scored(capsys, str(model), "--data", str(data), "--out", str(tmp_path / "a"))
    assert code == 0 and "held-out split the model records: trajectories 6-7 of 8" in out
    assert json.loads((tmp_path / "a" / "eval.json").read_text())["datasets"]["heat"]["n_trajectories"] == 2
    # the same file elsewhere, under another name: recognized by content
    copy = tmp_path / "copy.h5"
    shutil.copy(data, copy)
    code, out, _ = scored(capsys, str(model), "--data", str(copy), "--out", str(tmp_path / "b"))
    assert code == 0 and "held-out split the model records" in out
    # a test fraction that contradicts the record, and splits that would score training trajectories
    code, _, err = scored(capsys, str(model), "--data", str(data), "--split", "test", "--test-fraction", "0.5",
                          "--out", str(tmp_path / "c"))
    assert code == 2 and "records its split: held out trajectories 6-7" in err and err.count("\n") == 1
    for split in ("all", "train"):
        code, _, err = scored(capsys, str(model), "--data", str(data), "--split", split, "--out", str(tmp_path / "d"))
        assert code == 2 and "the model trained on" in err and "--include-training" in err
    code, out, _ = scored(capsys, str(model), "--data", str(data), "--split", "all", "--include-training",
                          "--out", str(tmp_path / "e"))
    assert code == 0 and "6 of them SEEN IN TRAINING" in out
    # a preset records no training on the file: all of it, said so
    code, out, _ = scored(capsys, "dpot-micro", "--data", str(data), "--out", str(tmp_path / "f"))
    assert code == 0 and "all 8 trajectories (the model records no training on this file)" in out


# ---- horizon-aware summaries (quiet wrong answer 4) -------------------------------------------------------
def result(full, h1, h5, horizon=30) -> DatasetResult:
    return DatasetResult("ks", full, [], 4, horizon, short_horizons={1: h1, 5: h5})


def test_a_saturated_full_rollout_is_not_the_headline():
    """KS: the full-rollout error saturates near 1 for model and persistence alike, while at horizon 5 the
    fine-tuned model is far better than persistence; the headline is horizon 5, with the reason."""
    r = result(1.027, 0.05, 0.226)
    r.persistence = result(0.99, 0.2, 0.600)
    what, value, base, note = headline(r)
    assert (what, value, base) == ("horizon 5", 0.226, 0.600) and "saturated" in note
    r.persistence = result(0.40, 0.2, 0.3)  # not saturated: the full rollout is informative
    assert headline(r)[0] == "full rollout (30 steps)" and headline(r)[3] == ""


def test_a_model_worse_than_persistence_is_not_called_saturated():
    """Issue 45: a linear wave at an unseen speed: the model was wrong, worse than persistence at every horizon, and
    the summary said the rollout "has decorrelated from the truth" and led with horizon 1."""
    r = result(1.6, 0.40, 0.95)
    r.persistence = result(0.9, 0.05, 0.30)
    what, value, base, note = headline(r)
    assert what == "full rollout (30 steps)" and "worse than persistence at every horizon" in note
    assert "decorrelated" not in note


def test_the_summary_and_eval_report_short_horizons_next_to_the_full_rollout(tuned, tmp_path, capsys):
    root, data = tuned
    code, out, _ = scored(capsys, str(root / "run" / "model"), "--data", str(data), "--out", str(tmp_path / "o"))
    assert code == 0 and "heat: l2 at horizon 1:" in out and "heat: l2 at horizon 5:" in out
    doc = json.loads((tmp_path / "o" / "eval.json").read_text())["datasets"]["heat"]
    assert set(doc["short_horizons"]) == {"1", "5"} and set(doc["persistence"]["short_horizons"]) == {"1", "5"}
    assert list(doc["vrmse"]) == list(doc["persistence"]["vrmse"]) == ["T", "full"]  # one name for each channel
    card = (root / "run" / "model" / "README.md").read_text()
    assert "| heat | 2 | 1 step(s) |" in card and "| heat | 2 | 5 step(s) |" in card and "| heat | 2 | full (10 steps) |" in card


# ---- resume and paths -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_resumed_fine_tune_keeps_its_zero_shot_and_accepts_the_same_file_by_another_path(tmp_path, capsys,
                                                                                            monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    write_canonical(tmp_path / "data" / "x.h5", heat_trajectories(6, 32, 14, seed=1), ["T"], "heat")
    run = ["finetune", "dpot-micro", "--out", str(tmp_path / "run"), "--test-fraction", "0.34", "--batch-size", "2",
           "--set", "evaluation.plots=false", "checkpoint.every=2"]
    monkeypatch.chdir(tmp_path / "data")
    assert main([*run, "--data", "x.h5", "--steps", "4"]) == 0
    first = capsys.readouterr().out
    (tmp_path / "run" / "finished.json").unlink(missing_ok=True)  # pretend it stopped after its checkpoint at step 2
    for ckpt in sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[1:]:
        shutil.rmtree(ckpt)
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main([*run, "--data", "../data/x.h5", "--steps", "4"]) == 0  # the same file by another relative path
    again = capsys.readouterr().out
    assert "resuming from step 2" in again
    zero = next(line for line in first.splitlines() if "full rollout" in line).split("->")[0]
    assert zero in again  # the zero-shot number survives the resume


# ---- rough edges: one line, exit 2, no traceback ------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory, tuned):
    root = tmp_path_factory.mktemp("files")
    heat = heat_trajectories(4, 32, 14, seed=5)
    np.save(root / "ntxyc.npy", np.transpose(heat, (0, 3, 1, 2, 4)))
    np.save(root / "four.npy", heat[..., 0])  # [N, X, Y, T]: 4-D
    write_canonical(root / "ok.h5", heat, ["T"], "heat")
    return root, tuned[0] / "run"


BAD = [  # (argv, words the one line must hold)
    (["eval", "dpot-micro", "--data", "{root}/missing.h5"], "no such file"),
    (["eval", "dpot-micro", "--data", "{root}/ntxyc.npy"], "does not guess"),
    (["eval", "dpot-micro", "--data", "{root}/four.npy", "--layout", "array:NXT"], "names 3 axes"),
    (["eval", "dpot-micro", "--data", "{root}/four.npy", "--layout", "array:NXTC"], "1-D data"),
    (["rollout", "dpot-micro", "--data", "{root}/four.npy", "--layout", "array:NXTC"], "1-D data"),
    (["eval", "dpot-micro", "--data", "{root}/ok.h5", "--layout", "foo"], "unknown layout 'foo'"),
    (["data", "inspect", "{root}/ok.h5", "--layout", "foo"], "unknown layout 'foo'"),
    (["data", "inspect", "{root}/ok.h5", "--layout", "array"], "an HDF5 file, not a plain array"),
    (["eval", "dpot-micro", "--data", "{root}/ok.h5", "--test-fraction", "0"], "--test-fraction must be in (0, 1)"),
    (["eval", "dpot-micro", "--data", "{root}/ok.h5", "--horizon", "0"], "--horizon: must be >= 1"),
    (["eval", "dpot-micro", "--data", "{root}/ok.h5", "--horizon", "-3"], "--horizon: must be >= 1"),
    (["rollout", "dpot-micro", "--data", "{root}/ok.h5", "--steps", "0"], "--steps must be >= 1"),
    (["rollout", "dpot-micro", "--data", "{root}/ok.h5", "--steps", "-3"], "--steps must be >= 1"),
    (["rollout", "dpot-micro", "--data", "{root}/ok.h5", "--index", "-1"], "out of range"),
    (["eval", "{run}", "--data", "{root}/ok.h5"], "training run directory: its model is"),
    (["rollout", "{run}", "--data", "{root}/ok.h5"], "training run directory: its model is"),
    (["finetune", "{run}", "--data", "{root}/ok.h5", "--out", "{root}/ft"], "training run directory: its model is"),
    (["push", "{run}", "me/model"], "training run directory: its model is"),
    (["push", "{root}/nowhere", "me/model"], "no such directory"),
    (["eval", "{root}/mdoel/", "--data", "{root}/ok.h5"], "no such directory"),
    (["info", "dpot-mirco"], "unknown model 'dpot-mirco'"),
    (["info", "./runs/mdoel"], "no such directory"),
    (["finetune", "dpot-micro", "--data", "{root}/ok.h5", "--out", "{root}/ft2", "--steps", "0"], "steps"),
    (["finetune", "dpot-micro", "--data", "{root}/ok.h5", "--out", "{root}/ft3", "--batch-size", "-1"], "batch"),
    (["finetune", "dpot-micro", "--data", "{root}/ok.h5", "--out", "{root}/ft4", "--test-fraction", "0"], "test_fraction"),
    (["eval", "dpot-micro"], "required: --data"),
    (["verify", "fno-2d"], "publishes no weights"),
    (["convert", "the-well", "{root}/nowhere", "{root}/x", "--dataset", "shear_flow"], "no such file or directory"),
    (["export", "dpot-mirco", "{root}/x"], "unknown model 'dpot-mirco'"),
    (["data", "generate", "ns", "--n", "0", "--out", "{root}/g.h5"], "n must be >= 1"),
    (["data", "generate", "nss", "--n", "2", "--out", "{root}/g.h5"], "invalid choice"),
]


@pytest.mark.parametrize("argv,words", BAD, ids=[" ".join(a[:2]) + f" #{i}" for i, (a, _) in enumerate(BAD)])
def test_every_bad_argument_is_one_line_and_exit_2(argv, words, files, capsys):
    root, run = files
    argv = [a.format(root=root, run=run) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert words in lines[0], lines[0]


def test_load_with_a_wrong_override_says_why_first(capsys):
    with pytest.raises(opzoo.WeightsError) as info:
        opzoo.load("dpot-micro", pretrained=True, width=64)
    first = str(info.value).splitlines()[0]
    assert first.startswith("the overrides ['width'] change tensors the published weights of dpot-micro fix")
    assert len(str(info.value).splitlines()) < 15


@pytest.mark.slow
def test_eval_out_holding_another_models_results_is_refused_unless_new(files, tmp_path, capsys):
    root, _ = files
    out = tmp_path / "out"
    assert scored(capsys, "dpot-micro", "--data", str(root / "ok.h5"), "--out", str(out))[0] == 0
    assert scored(capsys, "dpot-micro", "--data", str(root / "ok.h5"), "--out", str(out))[0] == 0  # same model: again
    code, _, err = scored(capsys, "aot-pot-micro", "--data", str(root / "ok.h5"), "--out", str(out))
    assert code == 2 and "holds evaluation results of dpot-micro" in err
    code, out_text, _ = scored(capsys, "aot-pot-micro", "--data", str(root / "ok.h5"), "--out", str(out), "--new")
    assert code == 0 and "moved the previous results" in out_text
    assert json.loads((out / "eval.json").read_text())["model"] == "aot-pot-micro"


def test_finetune_shows_how_the_model_was_adapted_and_prints_whole_numbers_as_such(tmp_path, capsys):
    two = write_canonical(tmp_path / "three.h5", np.concatenate([heat_trajectories(4, 32, 14, seed=2)] * 3, axis=-1),
                          ["a", "b", "c"], "heat3")
    assert main(["finetune", "dpot-micro", "--data", str(two), "--out", str(tmp_path / "run"), *RUN,
                 "--test-fraction", "0.25"]) == 0
    out = capsys.readouterr().out
    assert "adapted pot from" in out  # the adaptation log, without configuring Python logging
    assert " 1 -> " not in out and "random init 1 " not in out

"""``opzoo validate`` (timm's validate.py): many models, the same files, split and metrics; one CSV row per model
and file; a model that cannot read a file is a row saying why, and the others are still scored."""

import csv
import json

import numpy as np
import pytest

from opzoo.cli import main
from opzoo.data import write_canonical
from opzoo.training import generate_dataset


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    ns = generate_dataset({"kind": "ns", "res": 32, "nu": 1e-5, "steps": 12, "record_dt": 0.5, "n": 2, "seed": 5},
                          root / "ns.h5", progress=False)
    write_canonical(root / "line.h5", np.random.default_rng(0).random((2, 16, 12, 1), np.float32), ["u"])
    return root, str(ns), str(root / "line.h5")


def test_validate_scores_every_model_on_every_file_and_keeps_going(files, capsys):
    root, ns, line = files
    out = root / "results.csv"
    assert main(["validate", "*pot-micro", "--data", ns, line, "--out", str(out)]) == 1  # a failed row: not complete
    rows = list(csv.DictReader(out.open()))
    assert [(r["model"], r["file"], r["status"]) for r in rows] == [
        ("aot-pot-micro", ns, "ok"), ("aot-pot-micro", line, "failed"),
        ("dpot-micro", ns, "ok"), ("dpot-micro", line, "failed")]
    assert "1-D data" in rows[1]["reason"] and "2 scored, 2 failed" in capsys.readouterr().out
    # the same split and metric as `opzoo eval`
    assert main(["eval", "dpot-micro", "--data", ns, "--out", str(root / "eval")]) == 0
    scored = json.loads((root / "eval" / "eval.json").read_text())["datasets"]["ns"]
    dpot = rows[2]
    assert float(dpot["l2_full"]) == pytest.approx(scored["l2_full"], rel=1e-5)
    assert float(dpot["persistence_l2_full"]) == pytest.approx(scored["persistence"]["l2_full"], rel=1e-5)
    assert int(dpot["trajectories"]) == 2 and float(dpot["vrmse_one_step"]) > 0
    # the paired comparison with the first model (aot-pot-micro) on the same two trajectories
    diff = float(dpot["nRMSE_minus_first"])
    assert diff == pytest.approx(float(dpot["nRMSE"]) - float(rows[0]["nRMSE"]), abs=1e-5)  # the CSV has 6 digits
    assert float(dpot["nRMSE_minus_first_lo"]) <= diff <= float(dpot["nRMSE_minus_first_hi"])
    capsys.readouterr()
    assert main(["validate", "no-such-*", "--data", ns]) == 2
    assert "no preset with published weights matches 'no-such-*'" in capsys.readouterr().err


def test_every_row_scores_the_same_trajectories_and_names_its_metrics(files, tmp_path, capsys):
    """Issue 45: presets were scored on trajectories 29-31 and a fine-tuned model on 24-31 of one file, so persistence
    differed between rows of one CSV; l2_step5 was the error over the first 5 steps, not at step 5."""
    from opzoo.training import Trainer, finetune_config

    root, ns, line = files
    data = str(tmp_path / "ns8.h5")
    generate_dataset({"kind": "ns", "res": 32, "nu": 1e-5, "steps": 12, "record_dt": 0.5, "n": 8, "seed": 6}, data,
                     progress=False)
    cfg = finetune_config("dpot-micro", [data], str(tmp_path / "run"), steps=1, batch_size=2, test_fraction=0.5,
                          overrides={"evaluation.plots": False})
    Trainer(cfg, show_progress=False).fit()
    out = tmp_path / "v.csv"
    assert main(["validate", str(tmp_path / "run" / "model"), "aot-pot-micro", "--split", "test", "--data", data,
                 "--horizon", "6", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    # the fine-tune holds out 4-7 (test_fraction 0.5); a preset's test split is training's rule, the last 0.1: 7
    assert "trajectory 7 of 8 for every model" in text
    rows = list(csv.DictReader(out.open()))
    assert len({r["persistence_l2_full"] for r in rows}) == 1 and len({r["trajectories"] for r in rows}) == 1
    assert {r["split"] for r in rows} == {rows[0]["split"]}
    # the metrics are what their names say: over the first k steps, and at step k
    row = rows[1]
    assert float(row["l2_first1"]) == pytest.approx(float(row["l2_at_step1"]), rel=1e-5)
    assert float(row["l2_first5"]) != pytest.approx(float(row["l2_at_step5"]), rel=1e-3)
    assert row["grid"] == "32x32"
    # PDEBench's nRMSE with its spread, and the paired difference from the first model of the file
    assert float(row["nRMSE_lo"]) <= float(row["nRMSE"]) <= float(row["nRMSE_hi"]) or row["trajectories"] == "1"
    assert rows[0]["nRMSE_minus_first"] == "nan"  # the first is the reference

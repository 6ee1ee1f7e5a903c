"""`opzoo compare` (issue 58): cells planned and run as fine-tune runs on nested training trajectories, scored on the
same held-out trajectories, with Poseidon's gains over the baseline; the end-to-end runs are in the slow tier."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import opzoo
from opzoo.benchmark.compare import (
    Cell,
    CellResult,
    CompareOptions,
    CompareResult,
    cell_config,
    plan_cells,
    trajectory_scores,
)
from opzoo.benchmark.compare_report import cell_table, gains_table, markdown, write_csv
from opzoo.evaluation.gains import efficiency_gain


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    from opzoo.data.generators import generate

    path = tmp_path_factory.mktemp("compare") / "dr.h5"
    generate("diffusion-reaction", path, 10, seed=3, progress=False, res=32, steps=14)
    return path


def test_cells_each_model_from_its_weights_and_from_scratch_the_baseline_from_scratch():
    options = CompareOptions(trajectories=(8, 2), seeds=2)
    cells = plan_cells(["dpot-micro", "aot-pot-t"], "fno-2d", options)
    assert options.trajectories == (2, 8)
    assert cells[0] == Cell("fno-2d", "scratch", 2, 0)
    starts = {(c.model, c.start) for c in cells}
    assert starts == {("fno-2d", "scratch"), ("dpot-micro", "pretrained"), ("dpot-micro", "scratch"),
                      ("aot-pot-t", "scratch")}  # aot-pot-t publishes no weights
    assert len(cells) == 4 * 2 * 2
    no_scratch = plan_cells(["dpot-micro"], "fno-2d", CompareOptions(trajectories=(2,), scratch=False))
    assert [(c.model, c.start) for c in no_scratch] == [("fno-2d", "scratch"), ("dpot-micro", "pretrained")]
    with pytest.raises(opzoo.ConfigError, match="--trajectories"):
        CompareOptions(trajectories=(0, 2))


def test_every_cell_trains_on_a_prefix_of_the_training_split_and_is_tested_on_the_same_trajectories(data_file,
                                                                                                   tmp_path):
    from opzoo.training.build import open_datasets

    options = CompareOptions(trajectories=(2, 4), test_fraction=0.3)
    splits = {}
    for cell in (Cell("dpot-micro", "pretrained", 2, 0), Cell("dpot-micro", "pretrained", 4, 0),
                 Cell("fno-2d", "scratch", 4, 1)):
        (opened,) = open_datasets(cell_config(cell, [str(data_file)], tmp_path, options))
        splits[cell] = (list(opened.train.indices), list(opened.test.indices))
    trains = [t for t, _ in splits.values()]
    assert trains[0] == [0, 1] and trains[1] == [0, 1, 2, 3] == trains[2]  # nested, and equal across models
    assert len({tuple(t) for _, t in splits.values()}) == 1 and splits[Cell("fno-2d", "scratch", 4, 1)][1] == [7, 8, 9]
    cfg = cell_config(Cell("fno-2d", "scratch", 50, 0), [str(data_file)], tmp_path, options)
    with pytest.raises(opzoo.ConfigError, match="train_trajectories=50, but its training split holds 7"):
        open_datasets(cfg)


def test_trajectory_scores_by_hand():
    truth = torch.ones(2, 4, 4, 25, 1)
    truth[1] *= 2.0
    truth[..., 0, :, :] += 1.0  # some spatial variance for VRMSE
    pred = truth * 1.5
    scores = trajectory_scores(truth, pred, torch.tensor([True]))
    assert scores["rel_l1"].tolist() == pytest.approx([0.5, 0.5])
    assert scores["rel_l2"].tolist() == pytest.approx([0.5, 0.5])
    assert "vrmse_1_20" in scores and "vrmse_21_60" not in scores  # 25 predicted frames: the first window only
    assert scores["vrmse_1"].shape == (2,)


def synthetic_result(tmp_path, curves: dict, n_traj: int = 6) -> CompareResult:
    """Cells whose per-trajectory relative L1 errors are the curve's value times fixed per-trajectory factors."""
    factors = torch.linspace(0.8, 1.2, n_traj).tolist()
    options = CompareOptions(trajectories=(2, 8, 32))
    cells = []
    for (model, start), values in curves.items():
        for n, v in zip(options.trajectories, values):
            cell = Cell(model, start, n, 0)
            if v is None:
                cells.append(CellResult(cell, "refused: the model takes 1-D data"))
                continue
            per = {"rel_l1": [v * f for f in factors], "rel_l2": [v] * n_traj, "vrmse_1": [v] * n_traj}
            cells.append(CellResult(cell, "done", {"per_trajectory": per, "pdebench": {}, "fit": ["fields: ..."]}))
    return CompareResult(tmp_path, "fno-2d", options, cells, {}, {}, [m for m, _ in curves if m != "fno-2d"], ["x.h5"])


def test_gains_and_tables_from_a_synthetic_error_table(tmp_path):
    result = synthetic_result(tmp_path, {("fno-2d", "scratch"): [2.0, 0.5, 0.125],
                                         ("dpot-micro", "pretrained"): [0.5, 0.125, 1 / 32],
                                         ("dpot-micro", "scratch"): [4.0, 1.0, 0.25],
                                         ("aot-pot-micro", "scratch"): [0.5, 0.6, 0.7],  # rising: no EG
                                         ("well-fno-x", "pretrained"): [None, None, None]})
    rows, reps = cell_table(result)
    by = {(r["model"], r["start"], r["trajectories"]): r for r in rows}
    assert by[("dpot-micro", "pretrained", 8)]["rel_l1"] == pytest.approx(0.125)  # the median of the factors is 1
    assert by[("dpot-micro", "pretrained", 8)]["accuracy_gain"] == pytest.approx(4.0)  # 0.5 / 0.125
    assert by[("dpot-micro", "scratch", 32)]["accuracy_gain"] == pytest.approx(0.5)
    lo, hi = by[("dpot-micro", "pretrained", 8)]["accuracy_gain_lo"], by[("dpot-micro", "pretrained", 8)]["accuracy_gain_hi"]
    assert lo == pytest.approx(4.0) and hi == pytest.approx(4.0)  # paired: the same draws scale both alike
    assert by[("well-fno-x", "pretrained", 2)]["status"].startswith("refused: the model takes 1-D data")
    gains = {(g["model"], g["start"]): g for g in gains_table(result, reps)}
    assert gains[("dpot-micro", "pretrained")]["efficiency_gain"] == pytest.approx(4.0)  # reaches 0.125 at N = 8
    assert gains[("dpot-micro", "pretrained")]["accuracy_gain"] == pytest.approx(4.0)
    assert gains[("dpot-micro", "scratch")]["efficiency_gain"] == pytest.approx(
        efficiency_gain([2, 8, 32], [4.0, 1.0, 0.25], [2.0, 0.5, 0.125]).value)
    assert gains[("dpot-micro", "scratch")]["efficiency_gain_extrapolated"]
    assert ("well-fno-x", "pretrained") not in gains
    rising = gains[("aot-pot-micro", "scratch")]  # no EG, and no interval for it
    assert all(math.isnan(rising[k]) for k in ("efficiency_gain", "efficiency_gain_lo", "efficiency_gain_hi"))
    write_csv(tmp_path / "compare.csv", rows, ("model", "start", "trajectories", "seed", "status"))
    text = (tmp_path / "compare.csv").read_text()
    assert text.splitlines()[0].startswith("model,start,trajectories,seed,status") and "refused: the model" in text
    md = markdown(result, rows, list(gains.values()), "opzoo compare ...")
    assert "| dpot-micro | pretrained | 4 |" in md and "refused: the model takes 1-D data" in md


@pytest.mark.slow
def test_compare_end_to_end_then_again_redoes_nothing(data_file, tmp_path, capsys):
    """dpot-micro and aot-pot-micro against the FNO baseline at N = 2 and 4, and a model that cannot take the file:
    every output written; the same command again trains no cell and rewrites no weights; the runs' lineage shows the
    nested, equal training trajectories."""
    from opzoo.cli import main

    argv = ["compare", "dpot-micro", "aot-pot-micro", "well-fno-shear_flow", "--data", str(data_file), "--out",
            str(tmp_path / "cmp"), "--trajectories", "2,4", "--steps", "2", "--batch-size", "2",
            "--test-fraction", "0.3"]
    assert main(argv) == 0
    out = tmp_path / "cmp"
    for name in ("compare.csv", "gains.csv", "compare.md", "compare.png", "compare.json", "rollout-dpot-micro.png",
                 "rollout-aot-pot-micro.png", "rollout-fno-2d.png"):
        assert (out / name).is_file(), name
    rows = (out / "compare.csv").read_text().splitlines()
    refused = [r for r in rows if r.startswith("well-fno-shear_flow")]
    assert refused and all("refused: " in r for r in refused)  # no network here (pretrained), other fields (scratch)
    weights = sorted(out.glob("runs/**/model/model.safetensors"))
    assert len(weights) == 2 + 2 * 2 * 2  # the baseline's 2 cells, each micro model's 2 starts x 2 Ns
    stamps = {p: p.stat().st_mtime_ns for p in weights}
    records = {}
    for p in weights:
        cfg = json.loads((p.parent / "config.json").read_text())["pretrained_cfg"]
        entry = next(e for e in cfg["training_data"] if e["file"] == data_file.name)
        records[p.parent.parent.relative_to(out / "runs")] = (entry["train"], entry["test"])
    for key, (train, test) in records.items():
        n = int(str(key).split("/n")[1].split("/")[0])
        assert train == [0, n - 1] and test == [7, 9], (key, train, test)
    capsys.readouterr()
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert again.count("Nothing to do") == len(weights)
    assert {p: p.stat().st_mtime_ns for p in weights} == stamps
    gains = (out / "gains.csv").read_text()
    assert "dpot-micro,pretrained" in gains and "aot-pot-micro,pretrained" in gains
    assert main(["compare", "--report", str(out)]) == 0
    assert not math.isnan(float(rows[1].split(",")[5]))


def test_the_command_says_what_it_needs(tmp_path, capsys):
    from opzoo.cli import main

    assert main(["compare", "dpot-micro"]) == 2
    assert "--data FILE" in capsys.readouterr().err
    assert main(["compare", "--report", str(tmp_path)]) == 2
    assert "no compare.json there" in capsys.readouterr().err
    assert main(["compare", "dpot-micro", "--data", "x.h5", "--out", str(tmp_path), "--trajectories", "0,2"]) == 2
    assert "--trajectories" in capsys.readouterr().err


def test_a_saved_model_is_never_trained_from_scratch_under_that_name(tmp_path):
    """A saved model directory always loads its weights: its "scratch" cells are refused, not run from its weights."""
    from opzoo.benchmark.compare import run_cell

    saved = tmp_path / "saved"
    opzoo.load("fno-2d", width=8, modes=2).save_pretrained(saved)
    r = run_cell(Cell(str(saved), "scratch", 2, 0), ["x.h5"], tmp_path / "cmp", CompareOptions(trajectories=(2,)))
    assert r.status.startswith("refused: ") and "always brings its weights" in r.status
    assert not (tmp_path / "cmp" / "runs").exists()


@pytest.mark.slow  # two fresh processes
def test_a_steps_peak_memory_is_measured_and_grows_with_the_batch(tmp_path):
    """compare's measured memory of a training step (a fresh process, its peak resident memory reset before the
    step): an FNO's activations at batch 16 take tens of MiB more than at batch 1."""
    import sys

    from opzoo.benchmark.measure import step_memory_mib

    if not sys.platform.startswith("linux"):
        pytest.skip("peak resident memory is reset through Linux's /proc/self/clear_refs")
    opzoo.load("fno-2d").save_pretrained(tmp_path / "fno")
    small, large = (step_memory_mib(str(tmp_path / "fno"), [b, 64, 64, 1, 1]) for b in (1, 16))
    assert small is not None and large is not None and small > 0
    assert large > small + 30, (small, large)

"""`opzoo compare` (issues 58, 68, 72): cells planned, checked before the first one and run as fine-tune runs on nested
training trajectories, selected on one validation split, scored with Poseidon's error on the same held-out
trajectories, under the one output rule; the runs that train are in the slow tier."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import opzoo
from opzoo.benchmark.compare import CompareOptions, CompareResult, FileSplit, check_plan, parse_trajectories, plan_cells
from opzoo.benchmark.compare_cells import Cell, CellResult, cell_command, cell_config, read_record, trajectory_scores
from opzoo.benchmark.compare_report import cell_table, gains_table, markdown, write_csv
from opzoo.evaluation.gains import efficiency_gain

SMALL = ["--trajectories", "2,4", "--steps", "4", "--batch-size", "2", "--test-fraction", "0.3",
         "--validation-fraction", "0.15", "--evaluations", "2", "--baseline-steps", "8", "--patience", "1"]


@pytest.fixture(scope="module")
def data_file(tmp_path_factory) -> Path:
    from opzoo.data.generators import generate

    path = tmp_path_factory.mktemp("compare") / "dr.h5"
    generate("diffusion-reaction", path, 14, seed=3, progress=False, res=32, steps=14)
    return path


def test_cells_each_model_from_its_weights_and_from_scratch_the_baseline_from_scratch():
    options = CompareOptions(trajectories=(8, 2), seeds=2)
    cells = plan_cells(["dpot-micro", "aot-pot-t"], "fno-2d", options)
    assert options.trajectories == (2, 8) and options.baseline_steps == 5 * options.steps
    assert cells[0] == Cell("fno-2d", "scratch", 2, 0, baseline=True)
    starts = {(c.model, c.start) for c in cells}
    assert starts == {("fno-2d", "scratch"), ("dpot-micro", "pretrained"), ("dpot-micro", "scratch"),
                      ("aot-pot-t", "scratch")}  # aot-pot-t publishes no weights
    assert len(cells) == 4 * 2 * 2 and [c.baseline for c in cells].count(True) == 4
    no_scratch = plan_cells(["dpot-micro"], "fno-2d", CompareOptions(trajectories=(2,), scratch=False))
    assert [(c.model, c.start) for c in no_scratch] == [("fno-2d", "scratch"), ("dpot-micro", "pretrained")]


@pytest.mark.parametrize("kwargs, words", [
    ({"trajectories": (0, 2)}, "--trajectories"), ({"trajectories": tuple(range(1, 20001))}, "--trajectories"),
    ({"seeds": 100000}, "--seeds"), ({"steps": 0}, "--steps"), ({"validation_fraction": 0.95}, "fraction"),
    ({"at_frame": 3, "horizon": 2}, "--at-frame"), ({"lr": -1.0}, "--lr"), ({"functions": [["u", 3]]}, "--functions")])
def test_the_plan_is_bounded_before_anything_runs(kwargs, words):
    with pytest.raises(opzoo.ConfigError, match=words):
        CompareOptions(**kwargs)


def test_trajectories_are_parsed_in_one_line():
    assert parse_trajectories("2, 8,32") == (2, 8, 32)
    for bad in ("abc", "", "2,x", ",".join(["1"] * 40)):
        with pytest.raises(opzoo.ConfigError, match="--trajectories"):
            parse_trajectories(bad)


def test_validation_is_the_same_for_every_cell_never_trained_on_and_apart_from_the_test(data_file, tmp_path):
    from opzoo.training.build import open_datasets

    options = CompareOptions(trajectories=(2, 4), test_fraction=0.3, validation_fraction=0.15)
    splits = {}
    for cell in (Cell("dpot-micro", "pretrained", 2, 0), Cell("dpot-micro", "scratch", 4, 0),
                 Cell("fno-2d", "scratch", 4, 1, baseline=True)):
        cfg = cell_config(cell, [str(data_file)], tmp_path, options)
        assert cfg.training.selection == "validation"
        assert cfg.training.early_stopping == (options.patience if cell.baseline else None)
        assert cfg.training.steps == (options.baseline_steps if cell.baseline else options.steps)
        (opened,) = open_datasets(cfg)
        splits[cell] = [list(s.indices) for s in (opened.train, opened.validation, opened.test)]
    trains = [t for t, _, _ in splits.values()]
    assert trains == [[0, 1], [0, 1, 2, 3], [0, 1, 2, 3]]  # nested, and equal across models
    assert {tuple(v) for _, v, _ in splits.values()} == {(8, 9)}  # 2 of 14, just before the test split
    assert {tuple(t) for _, _, t in splits.values()} == {(10, 11, 12, 13)}
    # the largest N is checked against what is left to train on before the first cell
    split = check_plan([str(data_file)], options, predicted_from=10, scan=False)[0]
    assert (split.trajectories, split.test, split.validation, split.pool) == (14, 4, 2, 8)
    with pytest.raises(opzoo.ConfigError, match=r"--trajectories 9: .* 4 for testing .* 2 for validation .* 8 to "
                                                r"train on; give Ns of at most 8"):
        check_plan([str(data_file)], CompareOptions(trajectories=(2, 9), test_fraction=0.3,
                                                    validation_fraction=0.15), predicted_from=10)


def test_nan_anywhere_in_the_data_is_refused_before_the_first_cell(tmp_path):
    import h5py

    from opzoo.data.generators import generate

    path = tmp_path / "nan.h5"
    generate("diffusion-reaction", path, 10, seed=3, progress=False, res=16, steps=14)
    with h5py.File(path, "r+") as f:
        key = next(k for k in f if isinstance(f[k], h5py.Dataset) and f[k].ndim >= 4)
        data = f[key][...]
        data.flat[data.size // 10] = float("nan")  # in a training trajectory that no batch may ever sample
        f[key][...] = data
    with pytest.raises(opzoo.ConfigError, match="no cell was trained"):
        check_plan([str(path)], CompareOptions(trajectories=(2,)), predicted_from=10)


def test_each_cells_command_is_its_run_config(data_file, tmp_path):
    """The command compare.md lists (and --plan writes) parses into the very run config the compare trains: a cell
    run by hand is the compare's cell."""
    from opzoo.cli import build_parser
    from opzoo.cli.training import finetune_run_config

    options = CompareOptions(trajectories=(2, 4), test_fraction=0.3, validation_fraction=0.15, horizon=3,
                             field_map="u=u", fields=None)
    for cell in (Cell("fno-2d", "scratch", 2, 0, baseline=True), Cell("dpot-micro", "pretrained", 4, 1)):
        argv = cell_command(cell, [str(data_file)], tmp_path, options)
        assert argv[:2] == ["opzoo", "finetune"]
        args = build_parser().parse_args(argv[1:])
        assert finetune_run_config(args).to_dict() == cell_config(cell, [str(data_file)], tmp_path, options).to_dict()
    # --tune: the cells from a model's weights train what it says; from random init and the baseline, every parameter
    tuned = CompareOptions(trajectories=(2,), tune="lora:4", max_memory=3.5)
    for cell, tune in ((Cell("dpot-micro", "pretrained", 2, 0), "lora:4"), (Cell("dpot-micro", "scratch", 2, 0), "full"),
                       (Cell("fno-2d", "scratch", 2, 0, baseline=True), "full")):
        cfg = cell_config(cell, [str(data_file)], tmp_path, tuned)
        assert cfg.training.tune == tune and cfg.training.max_memory == 3.5
        args = build_parser().parse_args(cell_command(cell, [str(data_file)], tmp_path, tuned)[1:])
        assert finetune_run_config(args).to_dict() == cfg.to_dict()
    with pytest.raises(opzoo.ConfigError, match="--tune: a LoRA rank is at least 1, got 0"):
        CompareOptions(tune="lora:0")
    with pytest.raises(opzoo.ConfigError, match="--tune: 'some' is not one of full, head, lora or lora:RANK"):
        CompareOptions(tune="some")


def test_finetune_takes_the_first_n_trajectories_and_a_list_index_in_set(data_file, tmp_path, capsys):
    from opzoo.cli import build_parser, main
    from opzoo.cli.training import finetune_run_config

    assert "--train-trajectories" in build_parser()._subparsers._group_actions[0].choices["finetune"].format_help()
    base = ["finetune", "fno-2d", "--data", str(data_file), "--out", str(tmp_path / "r")]
    by_flag = finetune_run_config(build_parser().parse_args([*base, "--train-trajectories", "3"]))
    by_set = finetune_run_config(build_parser().parse_args([*base, "--set", "data.datasets.0.train_trajectories=3"]))
    assert by_flag.data.datasets[0].train_trajectories == 3 == by_set.data.datasets[0].train_trajectories
    assert main([*base, "--set", "data.datasets.4.train_trajectories=3"]) == 2
    assert "data.datasets is a list of 1; index it with 0 to 0, got '4'" in capsys.readouterr().err
    assert main([*base, "--set", "training.steps.x=3"]) == 2
    assert "'training.steps' is a value, not a section" in capsys.readouterr().err


def test_trajectory_scores_by_hand():
    truth = torch.ones(2, 4, 4, 25, 1)
    truth[1] *= 2.0
    truth[..., 0, :, :] += 1.0  # some spatial variance for VRMSE
    pred = truth * 1.5
    scores, missing = trajectory_scores(truth, pred, torch.tensor([True]))
    assert scores["rel_l1"].tolist() == pytest.approx([0.5, 0.5])
    assert scores["rel_l2"].tolist() == pytest.approx([0.5, 0.5])
    # 25 predicted frames: The Well's 6:12 (frames 6..12, the slice [5:12]) and Walrus's 1:20 are there, the rest not
    assert "vrmse_well_6_12" in scores and "vrmse_walrus_1_20" in scores
    assert set(missing) == {"vrmse_well_13_30", "vrmse_walrus_21_60"}
    assert "needs 30 predicted frames, the rollout predicts 25" in missing["vrmse_well_13_30"]


def test_the_well_window_6_12_is_the_slice_5_12():
    from opzoo.evaluation.protocols import window_scores

    v = torch.arange(1.0, 31.0).view(1, 30, 1)  # VRMSE equal to the 1-based frame number
    scores, missing = window_scores(v)
    assert scores["vrmse_well_6_12"].item() == pytest.approx(sum(range(6, 13)) / 7)  # frames 6..12
    assert scores["vrmse_well_13_30"].item() == pytest.approx(sum(range(13, 31)) / 18)
    assert scores["vrmse_well_1"].item() == 1.0 and scores["vrmse_walrus_1_20"].item() == pytest.approx(10.5)
    assert set(missing) == {"vrmse_walrus_21_60"}


def test_poseidons_error_by_hand():
    """Poseidon's error on a small table of predictions: the final frame only, each function's relative L1 over its
    channels and the grid, the median over trajectories per function, then the mean over functions."""
    from opzoo.evaluation.protocols import functions_of, poseidon_error, poseidon_errors

    names = ["rho", "velocity_x", "velocity_y", "p"]
    functions = functions_of(names)
    assert functions == [("rho", [0]), ("velocity", [1, 2]), ("p", [3])]
    truth = torch.ones(3, 2, 2, 3, 4)  # [B=3, 2x2 grid, H=3 frames, C=4]
    pred = truth.clone()
    pred[..., :2, :] += 100.0  # frames before the last: not scored
    for b, (e_rho, e_vx, e_vy, e_p) in enumerate([(0.1, 0.2, 0.4, 1.0), (0.3, 0.0, 0.0, 2.0), (0.2, 0.6, 0.6, 0.5)]):
        pred[b, :, :, -1, :] += torch.tensor([e_rho, e_vx, e_vy, e_p])
    errors = poseidon_errors(pred, truth, [c for _, c in functions])
    # velocity: (|0.2| + |0.4|) * 4 points / (1 + 1) * 4 points = 0.3 for trajectory 0
    assert torch.allclose(errors, torch.tensor([[0.1, 0.3, 1.0], [0.3, 0.0, 2.0], [0.2, 0.6, 0.5]], dtype=torch.float64),
                          atol=1e-6)
    medians = [0.2, 0.3, 1.0]
    assert poseidon_error(errors) == pytest.approx(sum(medians) / 3)
    # a zero truth counts as 1e-10 (scOT/metrics.py), and two unrelated fields are never merged on a guess
    assert poseidon_errors(torch.ones(1, 2, 1, 1), torch.zeros(1, 2, 1, 1), [[0]]).item() == pytest.approx(2e10)
    assert functions_of(["u", "v"]) == [("u", [0]), ("v", [1])]
    assert functions_of(["Vx", "Vy", "density"]) == [("V", [0, 1]), ("density", [2])]
    assert functions_of(["u", "v", "p"], [["u", "v"]]) == [("u+v", [0, 1]), ("p", [2])]


def synthetic_result(tmp_path, curves: dict, n_traj: int = 6, persistence: float = 10.0) -> CompareResult:
    """Cells whose per-trajectory errors (two functions) are the curve's value times fixed per-trajectory
    factors."""
    factors = torch.linspace(0.8, 1.2, n_traj).tolist()
    options = CompareOptions(trajectories=(2, 8, 32))
    cells = []

    def scores(v):
        per = {"rel_l1": [v] * n_traj, "rel_l2": [v] * n_traj, "vrmse_well_1": [v] * n_traj}
        return {"per_trajectory": per, "per_function": {"u": [v * f for f in factors], "v": [3 * v] * n_traj},
                "pdebench": {"RMSE": v, "my_metric": 2 * v}, "predicted_from": 1, "at_frame": 0}

    for (model, start), values in curves.items():
        for n, v in zip(options.trajectories, values):
            cell = Cell(model, start, n, 0, baseline=model == "fno-2d")
            if v is None:
                cells.append(CellResult(cell, "refused: the model takes 1-D data"))
                continue
            cells.append(CellResult(cell, "done", scores(v), record={"fit": ["fields: ..."], "lr": 1e-3,
                                                                    "selection": {"step": 3, "steps_done": 4}}))
    return CompareResult(tmp_path, "fno-2d", options, cells, scores(persistence), {}, [m for m, _ in curves
                                                                                       if m != "fno-2d"], ["x.h5"],
                         splits=[FileSplit("x.h5", 40, 20, 4, 4)])


def test_gains_are_of_poseidons_error_and_flag_a_baseline_worse_than_persistence(tmp_path):
    result = synthetic_result(tmp_path, {("fno-2d", "scratch"): [2.0, 0.5, 0.125],
                                         ("dpot-micro", "pretrained"): [0.5, 0.125, 1 / 32],
                                         ("dpot-micro", "scratch"): [4.0, 1.0, 0.25],
                                         ("aot-pot-micro", "scratch"): [0.5, 0.6, 0.7],  # rising: no EG
                                         ("well-fno-x", "pretrained"): [None, None, None]}, persistence=1.0)
    rows, reps = cell_table(result)
    by = {(r["model"], r["start"], r["trajectories"]): r for r in rows}
    # Poseidon's error: mean over functions u (median of the factors: 1) and v (3x) of their medians = 2 v
    assert by[("dpot-micro", "pretrained", 8)]["poseidon_l1"] == pytest.approx(2 * 0.125)
    for key in by:
        if key[0] != "well-fno-x":  # AG is the baseline's value of the column over the model's, same N and seed
            theirs = by[("fno-2d", "scratch", key[2])]["poseidon_l1"]
            assert by[key]["accuracy_gain"] == pytest.approx(theirs / by[key]["poseidon_l1"])
    lo, hi = by[("dpot-micro", "pretrained", 8)]["accuracy_gain_lo"], by[("dpot-micro", "pretrained", 8)]["accuracy_gain_hi"]
    assert lo == pytest.approx(4.0) and hi == pytest.approx(4.0)  # paired: the same draws scale both alike
    # persistence scores 2.0: the baseline at N = 2 (4.0) is worse than it, and so is every gain over it there
    assert by[("fno-2d", "scratch", 2)]["worse_than_persistence"] and not by[("fno-2d", "scratch", 32)][
        "worse_than_persistence"]
    assert by[("dpot-micro", "pretrained", 2)]["baseline_worse_than_persistence"]
    assert not by[("dpot-micro", "pretrained", 32)]["baseline_worse_than_persistence"]
    assert by[("well-fno-x", "pretrained", 2)]["status"].startswith("refused: the model takes 1-D data")
    gains = {(g["model"], g["start"]): g for g in gains_table(result, reps)}
    assert gains[("dpot-micro", "pretrained")]["efficiency_gain"] == pytest.approx(4.0)  # reaches 0.25 at N = 8
    assert gains[("dpot-micro", "pretrained")]["accuracy_gain"] == pytest.approx(4.0)
    assert gains[("dpot-micro", "scratch")]["efficiency_gain"] == pytest.approx(
        efficiency_gain([2, 8, 32], [8.0, 2.0, 0.5], [4.0, 1.0, 0.25]).value)
    scratch = gains[("dpot-micro", "scratch")]  # extrapolated: no interval, as none was measured there
    assert scratch["efficiency_gain_extrapolated"] and math.isnan(scratch["efficiency_gain_lo"])
    assert ("well-fno-x", "pretrained") not in gains
    rising = gains[("aot-pot-micro", "scratch")]
    assert all(math.isnan(rising[k]) for k in ("efficiency_gain", "efficiency_gain_lo", "efficiency_gain_hi"))
    write_csv(tmp_path / "compare.csv", rows, ("model", "start", "trajectories", "seed", "status"))
    text = (tmp_path / "compare.csv").read_text()
    assert text.splitlines()[0].startswith("model,start,trajectories,seed,status") and "refused: the model" in text
    assert "poseidon_l1" in text.splitlines()[0] and "selected_step" in text.splitlines()[0]
    md = markdown(result, rows, list(gains.values()))
    assert "| dpot-micro | pretrained | 4 |" in md and "refused: the model takes 1-D data" in md
    assert "worse than persistence" in md and "over a baseline worse than persistence" in md
    assert "up to 1000 steps, stopped after 5 evaluations" in md  # the baseline's budget and stopping rule
    assert "opzoo finetune dpot-micro --pretrained" in md  # each cell's command
    assert "## PDEBench's metrics and the plugins' (my_metric)" in md  # a plugin's metric is in the report too


def test_score_records_are_bound_to_their_cell_and_read_as_untrusted(tmp_path):
    cell = Cell("dpot-micro", "pretrained", 2, 0)
    path = tmp_path / "scores" / f"{cell.key}.json"
    path.parent.mkdir(parents=True)
    good = {"version": 2, "cell": cell.key, "digest": "d1", "lr": 1e-3, "fit": [], "selection": {},
            "scores": {"test_trajectories": [["x.h5", [8, 9]]], "per_trajectory": {"rel_l1": [0.1, 0.2]},
                       "per_function": {"u": [0.1, None]}, "pdebench": {}, "predicted_from": 1, "at_frame": 0}}
    path.write_text(json.dumps(good))
    assert read_record(cell, tmp_path, "d1")["lr"] == 1e-3
    assert read_record(cell, tmp_path, "other weights") is None  # stale: scored again
    for forged, words in (({**good, "scores": "x"}, "'scores' is not an object"),
                          ({**good, "extra": 1}, "unknown key"),
                          ([good], "a list, not an object"),
                          ({**good, "scores": {**good["scores"], "per_trajectory": {"rel_l1": [0.1]}}}, "2 numbers"),
                          ({**good, "scores": {**good["scores"], "per_trajectory": {"rel_l1": [0.1, -1]}}},
                           "not a finite number")):
        path.write_text(json.dumps(forged))
        with pytest.raises(opzoo.ConfigError, match=words):
            read_record(cell, tmp_path, "d1")
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(opzoo.ConfigError, match="nested too deeply"):
        read_record(cell, tmp_path, "d1")


def _plan(data_file, out, plan, *more):
    from opzoo.cli import main

    return main(["compare", "dpot-micro", "--data", str(data_file), "--out", str(out), *SMALL, "--plan", str(plan),
                 *more])


def test_a_rerun_with_another_argument_changes_nothing_and_says_what_changed(data_file, tmp_path, capsys):
    from opzoo.cli import main

    out = tmp_path / "cmp"
    assert _plan(data_file, out, tmp_path / "plan.txt") == 0
    commands = (tmp_path / "plan.txt").read_text().splitlines()
    assert len(commands) == 6 and all(c.startswith("opzoo finetune ") for c in commands)
    assert main(["compare", "--report", str(out)]) == 1  # nothing trained yet: written, and said
    assert "not run (yet)" in (out / "compare.csv").read_text()
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    capsys.readouterr()
    argv = ["compare", "dpot-micro", "--data", str(data_file), "--out", str(out), *SMALL]
    argv[argv.index("--steps") + 1] = "5"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "holds a compare of other arguments (steps: 4 -> 5); nothing was written" in err and "--new" in err
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    # --new moves it aside (nothing deleted) and plans again
    assert _plan(data_file, out, tmp_path / "plan2.txt", "--new") == 0
    assert len(list(tmp_path.glob("cmp.replaced-*"))) == 1


def test_the_output_rule_holds_for_compare(data_file, tmp_path, capsys):

    target = tmp_path / "user"
    target.mkdir()
    (target / "compare.md").write_text("mine")
    (target / "notes.txt").write_text("mine")
    cases = [(target, "holds files opzoo did not write (notes.txt)"), (tmp_path / "afile", "a file, not a directory"),
             (tmp_path / "afile" / "sub", "is not a directory")]
    (tmp_path / "afile").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(target)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")  # a link to nothing yet: writing through it would create its target
    cases += [(link, "a symbolic link"), (dangling, "a symbolic link")]
    for out, words in cases:
        assert _plan(data_file, out, tmp_path / "p.txt") == 2, out
        assert words in capsys.readouterr().err
    assert (target / "compare.md").read_text() == "mine" and not (tmp_path / "p.txt").exists()
    assert not (tmp_path / "nowhere").exists()
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "runs").symlink_to(target)
    assert _plan(data_file, planted, tmp_path / "p.txt") == 2
    assert "runs is a symbolic link" in capsys.readouterr().err


def test_a_tampered_compare_json_is_refused_in_one_line(data_file, tmp_path, capsys):
    from opzoo.cli import main

    out = tmp_path / "cmp"
    assert _plan(data_file, out, tmp_path / "plan.txt") == 0
    good = json.loads((out / "compare.json").read_text())
    for doc, words in (([good], "a list, not the object"), ({**good, "x": 1}, "unknown key"),
                       ({**good, "options": {**good["options"], "trajectories": list(range(1, 100_001))}},
                        "--trajectories"),
                       ({**good, "options": {**good["options"], "seeds": "x"}}, "--seeds"),
                       ({**good, "options": {**good["options"], "bogus": 1}}, "unknown option"),
                       ({**good, "version": 1}, "before the validation protocol")):
        (out / "compare.json").write_text(json.dumps(doc))
        assert main(["compare", "--report", str(out)]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err


def test_two_dimensional_models_on_a_one_dimensional_file_exit_non_zero_with_the_report(tmp_path, capsys):
    from opzoo.cli import main
    from opzoo.data.generators import generate

    path = tmp_path / "burgers.h5"
    generate("burgers", path, 12, seed=1, progress=False, res=32, steps=14)
    out = tmp_path / "cmp"
    code = main(["compare", "dpot-micro", "aot-pot-micro", "--baseline", "dpot-micro", "--data", str(path), "--out",
                 str(out), "--trajectories", "2", "--steps", "2", "--no-scratch"])
    assert code == 1
    rows = (out / "compare.csv").read_text().splitlines()[1:]
    assert rows and all("refused: " in r and "1-D data" in r for r in rows), rows
    assert "0 of " in capsys.readouterr().out


def run_compare(data_file, out, *more, env_threads="1"):
    import os

    return subprocess.Popen([sys.executable, "-m", "opzoo", "compare", "dpot-micro", "--data", str(data_file),
                             "--out", str(out), *SMALL, *more], env={**os.environ, "OMP_NUM_THREADS": env_threads},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_compare_end_to_end_then_again_redoes_nothing(data_file, tmp_path, capsys):
    """dpot-micro against the FNO baseline at N = 2 and 4: every output written; every cell kept its best validation
    step; the same command again trains no cell and rewrites no weights; the runs' lineage shows the nested, equal
    training trajectories and the validation split."""
    from opzoo.cli import main

    argv = ["compare", "dpot-micro", "--data", str(data_file), "--out", str(tmp_path / "cmp"), *SMALL]
    assert main(argv) == 0
    out = tmp_path / "cmp"
    for name in ("compare.csv", "gains.csv", "compare.md", "compare.png", "compare.json", "rollout-dpot-micro.png",
                 "rollout-fno-2d.png"):
        assert (out / name).is_file(), name
    import csv

    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert all(r["selected_step"] != "" and float(r["poseidon_l1"]) > 0 for r in rows)
    weights = sorted(out.glob("runs/**/model/model.safetensors"))
    assert len(weights) == 6
    stamps = {p: p.stat().st_mtime_ns for p in weights}
    for p in weights:
        cfg = json.loads((p.parent / "config.json").read_text())["pretrained_cfg"]
        entry = next(e for e in cfg["training_data"] if e["file"] == data_file.name)
        n = int(str(p).split("/n")[1].split("/")[0])
        assert (entry["train"], entry["validation"], entry["test"]) == ([0, n - 1], [8, 9], [10, 13])
        assert cfg["selection"]["step"] is not None
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().out.count("Nothing to do") == len(weights)
    assert {p: p.stat().st_mtime_ns for p in weights} == stamps
    md = (out / "compare.md").read_text()
    memory = [line for line in md.splitlines() if line.startswith("| fno-2d | 4,")]
    assert main(["compare", "--report", str(out)]) == 0
    assert [line for line in (out / "compare.md").read_text().splitlines() if line.startswith("| fno-2d | 4,")] \
        == memory  # measured once, kept with its cell: never measured again on a render


@pytest.mark.slow
def test_plan_commands_then_report_give_the_compare_and_jobs_2_the_same_scores(data_file, tmp_path):
    import os
    import shlex

    reference = run_compare(data_file, tmp_path / "one")
    assert reference.wait(timeout=600) == 0, reference.stderr.read()
    from opzoo.cli import main

    assert _plan(data_file, tmp_path / "planned", tmp_path / "plan.txt") == 0
    for line in (tmp_path / "plan.txt").read_text().splitlines():
        argv = shlex.split(line)
        done = subprocess.run([sys.executable, "-m", "opzoo", *argv[1:]], env={**os.environ, "OMP_NUM_THREADS": "1"},
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert main(["compare", "--report", str(tmp_path / "planned")]) == 0
    expected = (tmp_path / "one" / "compare.csv").read_text()
    assert (tmp_path / "planned" / "compare.csv").read_text() == expected
    parallel = run_compare(data_file, tmp_path / "two", "--jobs", "2")
    assert parallel.wait(timeout=600) == 0, parallel.stderr.read()
    assert (tmp_path / "two" / "compare.csv").read_text() == expected
    assert len(list((tmp_path / "two" / "logs").rglob("*.log"))) == 6


@pytest.mark.slow
def test_sigterm_in_the_first_cell_stops_the_whole_compare(data_file, tmp_path):
    out = tmp_path / "cmp"
    proc = run_compare(data_file, out, "--baseline-steps", "2000")
    first = out / "runs" / "fno-2d" / "scratch" / "n2" / "seed0" / "log.jsonl"
    t0 = time.time()
    while not (first.exists() and '"kind": "train"' in first.read_text()):
        assert proc.poll() is None and time.time() - t0 < 300, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    sent = time.time()
    code = proc.wait(timeout=60)
    assert code == 128 + signal.SIGTERM and time.time() - sent < 25  # within the stop deadline (20 s)
    assert "re-run the same compare command to resume" in proc.stderr.read()
    assert sorted(p.relative_to(out / "runs") for p in (out / "runs").glob("*/*/*/*")) == \
        [Path("fno-2d/scratch/n2/seed0")]  # no later cell's directory
    assert list((out / "runs" / "fno-2d" / "scratch" / "n2" / "seed0" / "checkpoints").glob("step-*"))


@pytest.mark.slow
def test_two_compares_into_one_out_at_once_one_is_refused(data_file, tmp_path):
    out = tmp_path / "cmp"
    first = run_compare(data_file, out)
    lock = out / ".lock"
    t0 = time.time()
    while not (lock.exists() and lock.read_text().strip()):
        assert time.time() - t0 < 120 and first.poll() is None
        time.sleep(0.05)
    second = run_compare(data_file, out)
    assert second.wait(timeout=120) == 2
    err = second.stderr.read().strip()
    assert "in use by another compare" in err and len(err.splitlines()) == 1, err
    assert first.wait(timeout=600) == 0, first.stderr.read()
    rows = (out / "compare.csv").read_text().splitlines()[1:]
    assert len(rows) == 6 and all(",done," in r for r in rows)

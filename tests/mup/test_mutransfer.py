"""`opzoo mutransfer` (μTransfer-FNO Algorithm 1): config validation, the sweep and its outputs,
the proxy -> target transfer, resuming an interrupted sweep, and the CLI."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

import opzoo
from opzoo.training import read_log
from opzoo_mup.mutransfer import (
    best_hyper,
    draw_landscape,
    landscape_curves,
    load_config,
    plot_landscape,
    run_mutransfer,
)

from .conftest import fno1d_run_document


def _config(tmp_path, data, **sweep) -> dict:
    run = fno1d_run_document(tmp_path / "unused", data, training={"steps": 3, "batch_size": 4, "log_every": 1,
                                                                  "noise_scale": 0.0},
                             checkpoint={"every": 2, "keep_last": 2})
    del run["output_dir"]
    return {"output_dir": str(tmp_path / "mt"), "run": run,
            "sweep": {"proxy_modes": 2, "target_modes": 8, "landscape_modes": [4], "lr": [1e-3, 1e-2],
                      "seeds": [0], "parametrizations": ["standard", "mup"], **sweep}}


def _write(tmp_path, doc, name="mt.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # the whole sweep and its resume; test_cli_command_with_device_and_batch_size_sweep is the quick one
def test_sweep_transfer_outputs_and_resume(tmp_path, burgers_file, capsys):
    cfg = load_config(_write(tmp_path, _config(tmp_path, burgers_file)))
    summary = run_mutransfer(cfg, progress=False)
    out = tmp_path / "mt"
    rows = _rows(out / "sweep.csv")
    # sweep: 2 parametrizations x K in {2, 4} x 2 lrs x 1 seed, then the target K = 8 per parametrization
    assert len(rows) == 2 * 2 * 2 + 2
    assert {(r["parametrization"], r["K"]) for r in rows} >= {("mup", "8"), ("standard", "8")}
    assert all(r["status"] == "ok" and math.isfinite(float(r["loss"])) for r in rows)
    assert (out / "lr_landscape.png").stat().st_size > 10_000
    assert json.loads((out / "transfer.json").read_text()) == json.loads(json.dumps(summary))
    for p in ("standard", "mup"):
        proxy = [r for r in rows if r["parametrization"] == p and r["K"] == "2"]
        best = min(proxy, key=lambda r: float(r["loss"]))
        entry = summary["parametrizations"][p]
        assert entry["proxy_best"]["lr"] == float(best["lr"])  # Algorithm 1, line 2
        assert entry["target"]["lr"] == float(best["lr"])      # the master lr is transferred as is...
        target = next(r for r in rows if r["parametrization"] == p and r["K"] == "8")
        assert float(target["lr"]) == float(best["lr"])
        run_cfg = json.loads((out / "runs" / f"{p}/K8/lr{float(best['lr']):.6g}-bs4-b0.9,0.999-s0" /
                              "run_config.json").read_text())
        hooks = run_cfg["optimizer"]["hooks"]
        # ...and under μP the mup-fno hook at base K_proxy rescales the spectral lr and init (lines 4-5)
        assert hooks == ([{"name": "mup-fno", "args": {"base_modes": 2}}] if p == "mup" else [])
        assert run_cfg["model"]["args"]["modes"] == 8
    assert summary["parametrizations"]["mup"]["target"]["spectral_init_and_lr_multiplier"] == pytest.approx(
        math.sqrt(math.log(2) / math.log(8)))

    # a finished sweep restarted skips every run
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/**/result.json")}
    # μP at the proxy's K (c = 1) is the standard run, trained once: 10 rows, 8 runs
    assert len(stamps) == 8 and not (out / "runs" / "mup" / "K2").exists()
    for mup_row in (r for r in rows if r["parametrization"] == "mup" and r["K"] == "2"):
        twin = next(r for r in rows if r["parametrization"] == "standard" and r["K"] == "2" and r["lr"] == mup_row["lr"])
        assert (mup_row["run_dir"], mup_row["loss"]) == (twin["run_dir"], twin["loss"])
    capsys.readouterr()
    run_mutransfer(load_config(_write(tmp_path, _config(tmp_path, burgers_file))), progress=True)
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/**/result.json")} == stamps
    shown = "".join(capsys.readouterr())  # the progress bar and its resume note
    assert "resuming: 8 of 8 sweep runs already finished" in shown and "sweep: 100%" in shown and "8/8" in shown
    # interrupted inside one run (after its step-2 checkpoint, before result.json): only that run
    # trains again, resuming from its checkpoint, to the same loss
    victim = out / "runs" / "mup/K4/lr0.01-bs4-b0.9,0.999-s0"
    before = json.loads((victim / "result.json").read_text())
    (victim / "result.json").unlink()
    shutil.rmtree(victim / "checkpoints" / "step-00000003")
    kept = (victim / "checkpoints" / "step-00000002" / "state.json").stat().st_mtime_ns
    run_mutransfer(load_config(_write(tmp_path, _config(tmp_path, burgers_file))), progress=False)
    after = json.loads((victim / "result.json").read_text())
    assert after["loss"] == before["loss"] and after["train_loss"] == before["train_loss"]
    assert (victim / "checkpoints" / "step-00000002" / "state.json").stat().st_mtime_ns == kept  # resumed, not redone
    log = [json.loads(line) for line in (victim / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["kind"] == "train"] == [1, 2, 3]
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/**/result.json") if p.parent != victim} == {
        p: t for p, t in stamps.items() if p.parent != victim}
    # finished runs copied into another sweep's folder are reused there, and the CSV points at the copies
    shutil.copytree(out / "runs", tmp_path / "copy" / "runs")
    run_mutransfer(load_config(_write(tmp_path, _config(tmp_path, burgers_file)), output_dir=str(tmp_path / "copy")),
                   progress=False)
    copied = _rows(tmp_path / "copy" / "sweep.csv")
    assert [(r["loss"], r["seconds"]) for r in copied] == [(r["loss"], r["seconds"]) for r in _rows(out / "sweep.csv")]
    assert all(r["run_dir"].startswith(str(tmp_path / "copy" / "runs")) for r in copied)


def test_mup_at_the_proxy_reuses_the_standard_run_only_when_identical(tmp_path, burgers_file):
    from opzoo_mup.mutransfer import RunSpec, trained_as

    spec = RunSpec("mup", 2, 1e-3, 4, (0.9, 0.999), 0)
    cfg = load_config(_write(tmp_path, _config(tmp_path, burgers_file)))
    assert trained_as(cfg, spec) == RunSpec("standard", 2, 1e-3, 4, (0.9, 0.999), 0)
    for other in (RunSpec("mup", 4, 1e-3, 4, (0.9, 0.999), 0), RunSpec("standard", 2, 1e-3, 4, (0.9, 0.999), 0)):
        assert trained_as(cfg, other) == other
    clipped = load_config(_write(tmp_path, _config(tmp_path, burgers_file, mup={"grad_clip": 0.01})))
    alone = load_config(_write(tmp_path, _config(tmp_path, burgers_file, parametrizations=["mup"])))
    assert trained_as(clipped, spec) == spec and trained_as(alone, spec) == spec


def test_best_hyper_is_the_seed_mean_argmin_and_skips_divergence():
    def row(lr, seed, loss, K=4, p="mup"):
        return {"parametrization": p, "K": K, "lr": lr, "batch_size": 8, "beta1": 0.9, "beta2": 0.99,
                "seed": seed, "loss": loss}

    rows = [row(1e-3, 0, 0.30), row(1e-3, 1, 0.10),   # mean 0.20
            row(3e-3, 0, 0.18), row(3e-3, 1, 0.19),   # mean 0.185: the best
            row(1e-2, 0, 0.01), row(1e-2, 1, math.inf)]  # one seed diverged: inf
    (lr, bs, betas), loss = best_hyper(rows, "mup", 4)
    assert (lr, bs, betas) == (3e-3, 8, (0.9, 0.99)) and loss == pytest.approx(0.185)
    with pytest.raises(opzoo.OpzooError, match="every mup run at K=4 diverged"):
        best_hyper([row(1e-2, 0, math.inf)], "mup", 4)


@pytest.mark.slow
def test_landscape_plot_has_one_curve_per_k_and_stars_each_seed_mean_optimum(tmp_path):
    def row(p, K, lr, seed, loss, bs=8):
        return {"parametrization": p, "K": K, "lr": lr, "batch_size": bs, "beta1": 0.9, "beta2": 0.99,
                "seed": seed, "loss": loss}

    rows = [
        # standard, K=4: seed 1 alone would pick 1e-2; the seed mean picks 1e-3
        row("standard", 4, 1e-3, 0, 0.20), row("standard", 4, 1e-3, 1, 0.20),
        row("standard", 4, 1e-2, 0, 0.50), row("standard", 4, 1e-2, 1, 0.05),
        row("standard", 4, 1e-1, 0, math.inf), row("standard", 4, 1e-1, 1, 0.01),  # diverged: no point
        # standard, K=8: the optimum moved down to 1e-4
        row("standard", 8, 1e-4, 0, 0.10), row("standard", 8, 1e-3, 0, 0.30),
        # μP: K=8 also best at 1e-3; a batch-size-4 run (better, but not the proxy's fixed bs) is left out
        row("mup", 4, 1e-3, 0, 0.20), row("mup", 4, 1e-2, 0, 0.40),
        row("mup", 8, 1e-3, 0, 0.15), row("mup", 8, 1e-2, 0, 0.25), row("mup", 8, 1e-2, 0, 0.01, bs=4),
    ]
    fixed = {"standard": (8, (0.9, 0.99)), "mup": (8, (0.9, 0.99))}
    curves = landscape_curves(rows, fixed)
    assert curves["standard"][4] == {"points": [(1e-3, 0.20), (1e-2, pytest.approx(0.275))],
                                     "best": (1e-3, 0.20)}
    assert curves["standard"][8]["best"] == (1e-4, 0.10)
    assert curves["mup"][8] == {"points": [(1e-3, 0.15), (1e-2, 0.25)], "best": (1e-3, 0.15)}
    assert landscape_curves(rows)["mup"][8]["best"] == (1e-2, 0.01)  # not fixed: the bs=4 run counts

    fig = draw_landscape(rows, fixed, title="synthetic")
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["standard parametrization", "μTransfer-FNO (μP)"]
    for ax, p in zip(axes, ("standard", "mup")):
        lines = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
        assert [ln.get_label() for ln in lines] == ["K = 4", "K = 8"]
        for ln, star, K in zip(lines, stars, (4, 8)):
            xs, ys = zip(*curves[p][K]["points"])
            assert list(ln.get_xdata()) == pytest.approx(xs) and list(ln.get_ydata()) == pytest.approx(ys)
            assert (star.get_xdata()[0], star.get_ydata()[0]) == pytest.approx(curves[p][K]["best"])
            assert star.get_color() == ln.get_color()
        assert len(stars) == 2
    png = plot_landscape(rows, tmp_path / "landscape.png", fixed, title="synthetic")
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["sweep"].pop("lr"), r"sweep: missing required field\(s\) 'lr'"),
    (lambda d: d["sweep"].update(lr=[]), r"sweep\.lr: expected a non-empty list"),
    (lambda d: d["sweep"].update(proxy_modes=1), r"sweep\.proxy_modes: μP needs at least 2"),
    (lambda d: d["sweep"].update(target_modes=1), r"sweep\.target_modes: μP needs at least 2"),
    (lambda d: d["sweep"].update(landscape_modes=[4, 1]), r"sweep\.landscape_modes: μP needs at least 2"),
    (lambda d: d["sweep"].update(parametrizations=["sp"]), r"sweep\.parametrizations"),
    (lambda d: d["sweep"].update(mup={"base_modes": 3}), r"sweep\.mup\.base_modes: set by mutransfer"),
    (lambda d: d["sweep"].update(betas=[[0.9]]), r"sweep\.betas"),
    (lambda d: d["sweep"].update(mup={"clip": 0.01}), r"sweep\.mup: .*'clip'"),
    (lambda d: d["sweep"].update(bogus=1), r"unknown field.*'bogus'"),
    (lambda d: d["run"]["training"].update(steps=0), r"run \(K=2\): training\.steps must be >= 1"),
    (lambda d: d["run"].update(output_dir="x"), r"run\.output_dir: set the top-level output_dir"),
    (lambda d: d["run"]["optimizer"].update(name="sgd"),
     r"run\.optimizer\.name: .*'sgd' is outside the paper's scope.*optimizer-dependent.*we focus on the Adam "
     r"optimizer.*sweep\.mup\.allow_non_adam: true"),
])
def test_bad_configs_are_named_before_any_training(tmp_path, burgers_file, edit, message):
    doc = _config(tmp_path, burgers_file)
    edit(doc)
    with pytest.raises(opzoo.ConfigError, match=message):
        load_config(_write(tmp_path, doc))
    assert not (tmp_path / "mt").exists()


def test_relative_data_paths_next_to_the_config_work_from_any_directory(tmp_path, burgers_file, monkeypatch):
    """Validation and every run resolve a relative data path the same way (working directory
    first, then the config's folder), so a sweep validated against the config folder also trains."""
    config_dir, elsewhere = tmp_path / "configs", tmp_path / "elsewhere"
    (config_dir / "data").mkdir(parents=True)
    elsewhere.mkdir()
    shutil.copy(burgers_file, config_dir / "data" / "b.h5")
    doc = _config(tmp_path, burgers_file)
    doc["run"]["data"]["datasets"][0]["path"] = "data/b.h5"
    path = _write(config_dir, doc)
    monkeypatch.chdir(elsewhere)
    cfg = load_config(path)
    assert cfg.run["data"]["datasets"][0]["path"] == str(config_dir / "data" / "b.h5")
    (elsewhere / "data").mkdir()  # a file under the working directory wins, as in `opzoo train`
    shutil.copy(burgers_file, elsewhere / "data" / "b.h5")
    assert load_config(path).run["data"]["datasets"][0]["path"] == "data/b.h5"


@pytest.mark.slow
def test_cli_command_with_device_and_batch_size_sweep(tmp_path, burgers_file, capsys):
    from opzoo.cli import main

    doc = _config(tmp_path, burgers_file, landscape_modes=[], batch_size=[2, 4], lr=[3e-3],
                  parametrizations=["mup"], target_modes=4, metric="train")
    code = main(["mutransfer", str(_write(tmp_path, doc)), "--out", str(tmp_path / "cli"), "--device", "cpu",
                 "--quiet", "--json"])
    assert code == 0
    out = capsys.readouterr().out
    assert "mup: proxy K=2 best lr 0.003" in out
    summary = json.loads(out.strip().splitlines()[-1])
    rows = _rows(tmp_path / "cli" / "sweep.csv")
    assert sorted(r["batch_size"] for r in rows if r["K"] == "2") == ["2", "4"]
    best = min((r for r in rows if r["K"] == "2"), key=lambda r: float(r["loss"]))
    assert summary["parametrizations"]["mup"]["target"]["batch_size"] == int(best["batch_size"])
    run_cfg = json.loads(next((tmp_path / "cli" / "runs").glob("mup/K4/*/run_config.json")).read_text())
    assert run_cfg["training"]["device"] == "cpu"
    # metric: train ranks by the mean training loss of the last 10 % of steps (here: the last of 3)
    for r in rows:
        last = [x["loss"] for x in read_log(Path(r["run_dir"]) / "log.jsonl", kind="train")][-1]
        assert float(r["loss"]) == float(r["train_loss"]) == pytest.approx(last, rel=1e-12)
    assert main(["mutransfer", str(tmp_path / "missing.yaml")]) == 2


def test_pot_preset_modes_key_keeps_the_presets_other_mixer_args(tmp_path, burgers_file):
    """``modes_key: mixer_args.modes`` on dpot-ti sets only the modes (a model override replaces the
    whole ``mixer_args`` dict, so the preset's n_blocks is carried over), and μP adds the hook."""
    from opzoo_mup.mutransfer import RunSpec, run_document

    doc = _config(tmp_path, burgers_file, modes_key="mixer_args.modes")
    doc["run"]["model"] = {"name": "dpot-ti", "args": {"width": 32}}
    from opzoo_mup.mutransfer import MutransferConfig

    cfg = opzoo.build_dataclass(MutransferConfig, doc, "")
    run = run_document(cfg, RunSpec("mup", 8, 1e-3, 4, (0.9, 0.99), 1), tmp_path / "r")
    assert run["model"]["args"] == {"width": 32, "mixer_args": {"n_blocks": 4, "modes": 8}}
    assert run["optimizer"]["hooks"] == [{"name": "mup-fno", "args": {"base_modes": 2}}]
    assert (run["seed"], run["optimizer"]["lr"], run["optimizer"]["betas"], run["training"]["batch_size"]) == (
        1, 1e-3, [0.9, 0.99], 4)
    import torch

    with torch.device("meta"):
        model = opzoo.load("dpot-ti", **run["model"]["args"])
    assert {w.modes for w in opzoo.find_spectral_weights(model)} == {(8, 8)}

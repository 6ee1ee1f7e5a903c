"""``opzoo demo``: the micro presets loaded by name, held-out errors vs persistence, fine-tuning, plots."""

from pathlib import Path

import pytest
import torch
import yaml

from opzoo import MICRO_SUITE
from opzoo.evaluation import Persistence
from opzoo_aot.demo import run_demo

ROOT = Path(__file__).resolve().parents[2]


def test_persistence_repeats_the_last_input_frame():
    x = torch.randn(2, 8, 8, 5, 3)
    out = Persistence().rollout(x, 4)
    assert out.shape == (2, 8, 8, 4, 3)
    for t in range(4):
        assert torch.equal(out[..., t, :], x[..., -1, :])


@pytest.mark.parametrize("config", ["dpot-micro", "aot-pot-micro"])
def test_demo_held_out_data_are_the_pretraining_pdes_with_new_seeds(config):
    doc = yaml.safe_load((ROOT / "configs" / "micro" / f"{config}.yaml").read_text())
    specs = {d["name"]: d["generate"] for d in doc["data"]["datasets"]}
    assert list(specs) == list(MICRO_SUITE)
    for name, spec in specs.items():
        assert {k: v for k, v in spec.items() if k not in ("n", "seed")} == MICRO_SUITE[name]
        assert spec["seed"] == 0  # the demo's held-out seeds differ


def test_the_two_micro_configs_differ_only_in_the_model(tmp_path):
    a, b = (yaml.safe_load((ROOT / "configs" / "micro" / f"{n}.yaml").read_text()) for n in ("dpot-micro", "aot-pot-micro"))
    assert a["model"]["name"] == "dpot-micro" and b["model"]["name"] == "aot-pot-micro"
    for doc in (a, b):
        doc.pop("model"), doc.pop("output_dir")
    assert a == b  # same data, budget and seed


@pytest.mark.slow  # 15 s: `make demo` at small sizes (the slow tier and CI run it)
def test_demo_quick_run_prints_the_tables_and_writes_the_plots(tmp_path, capsys):
    result = run_demo(out_dir=tmp_path, finetune_steps=2, n_test=2, n_finetune=6, batch_size=2)
    out = capsys.readouterr().out
    assert "opzoo.load('dpot-micro', pretrained=True)" in out and "opzoo.load('aot-pot-micro', pretrained=True)" in out
    assert "persistence" in out and "aot vs dpot" in out
    for name in MICRO_SUITE:
        assert name in out and set(result.l2_full[name]) == {"dpot-micro", "aot-pot-micro", "persistence"}
    assert "aot-pot-micro zero-shot" in out and "aot-pot-micro from scratch" in out
    ft = result.finetune
    assert ft.zero_shot.l2_full != ft.finetuned.l2_full
    for png in result.plots:
        assert png.is_file() and png.stat().st_size > 10_000
        assert str(png) in out
    # a re-run with the same arguments reuses the two finished runs: nothing moved aside, nothing retrained
    runs = sorted((tmp_path / "finetune").iterdir())
    assert [p.name.rsplit("-", 1)[0] for p in runs] == ["aot-pot-micro-finetuned", "aot-pot-micro-scratch"]
    stamps = {p: p.stat().st_mtime_ns for run in runs for p in run.rglob("*") if p.is_file()}
    again = run_demo(out_dir=tmp_path, finetune_steps=2, n_test=2, n_finetune=6, batch_size=2).finetune
    out = capsys.readouterr().out
    assert out.count("reusing that finished run") == 2
    assert {p: p.stat().st_mtime_ns for run in runs for p in run.rglob("*") if p.is_file()} == stamps
    assert sorted((tmp_path / "finetune").iterdir()) == runs and not list(tmp_path.glob("**/*.replaced-*"))
    for field in ("zero_shot", "finetuned", "scratch"):
        assert getattr(again, field) == getattr(ft, field)


@pytest.mark.slow
def test_full_demo_beats_persistence_and_fine_tuning_beats_zero_shot_and_scratch(tmp_path):
    result = run_demo(out_dir=tmp_path)
    for name, row in result.l2_full.items():
        for model in ("dpot-micro", "aot-pot-micro"):
            assert row[model] < row["persistence"], (name, row)
    ft = result.finetune
    assert ft.finetuned.l2_full < ft.zero_shot.l2_full, ft
    assert ft.finetuned.l2_full < ft.scratch.l2_full, ft


def test_a_demo_rerun_with_other_shipped_weights_trains_again(tmp_path):
    """The fine-tuned run's directory key covers the weights it starts from: an upgraded opzoo-aot does not reuse a
    run fine-tuned from its previous weights."""
    import types

    import opzoo
    from opzoo_aot.demo import demo_run_dir, weights_digest

    data = tmp_path / "x.h5"
    data.write_bytes(b"trajectories")
    cfg = types.SimpleNamespace(to_dict=lambda: {"model": {"name": "aot-pot-micro"}, "seed": 0})
    shipped = opzoo.load("aot-pot-micro", pretrained=True)
    other = opzoo.load("aot-pot-micro", pretrained=True)
    with torch.no_grad():
        next(other.parameters()).add_(1e-3)
    assert weights_digest(shipped) == weights_digest(opzoo.load("aot-pot-micro", pretrained=True))
    dirs = {demo_run_dir(tmp_path, "finetuned", cfg, data, weights_digest(m)) for m in (shipped, other)}
    assert len(dirs) == 2

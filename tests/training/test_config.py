"""Bad run configs are rejected before any training starts, naming the problem."""

import pytest

from opzoo.errors import ConfigError, UnknownNameError
from opzoo.training import load_run_config, parse_run_config

from .conftest import run_document, tiny_pot_args, write_json


@pytest.fixture
def good(tmp_path, datasets):
    return run_document(tmp_path / "out", datasets, model={"name": "pot", "args": tiny_pot_args()})


def test_good_config_parses_with_defaults(good):
    cfg = parse_run_config(good)
    assert cfg.optimizer.betas == (0.9, 0.9) and cfg.optimizer.weight_decay == 1e-6
    assert cfg.schedule.name == "one-cycle" and cfg.schedule.div_factor == 1e4 and cfg.schedule.warmup == 0.2
    assert cfg.training.noise_scale == 5e-4
    assert [d.name for d in cfg.data.datasets] == ["heat", "advection"]


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d["training"].update(stepz=3), r"training: unknown field\(s\) 'stepz'"),
    (lambda d: d.update(optimiser={}), r"unknown field\(s\) 'optimiser'"),
    (lambda d: d["training"].update(steps="ten"), r"training\.steps: expected int, got 'ten' \(str\)"),
    (lambda d: d["training"].update(batch_size=2.5), r"training\.batch_size: expected int, got 2.5"),
    (lambda d: d["optimizer"].update(lr="fast") if "optimizer" in d else d.update(optimizer={"lr": "fast"}),
     r"optimizer\.lr: expected float, got 'fast' \(str\)"),
    (lambda d: d["data"]["datasets"][0].update(path="/nonexistent/heat.h5"),
     r"data\.datasets\[0\]\.path: file '/nonexistent/heat.h5' does not exist"),
    (lambda d: d["data"]["datasets"][1].pop("path"), r"data\.datasets\[1\]: missing required field\(s\) 'path'"),
    (lambda d: d.update(schedule={"name": "triangle"}), r"schedule\.name: expected one of \[.*\], got 'triangle'"),
    (lambda d: d["training"].update(ema=1.5), r"training\.ema must be in \(0, 1\)"),
    (lambda d: d["data"]["datasets"][1].update(name="heat"), r"'heat' is used by two datasets"),
])
def test_bad_config_named(good, mutate, match):
    mutate(good)
    with pytest.raises(ConfigError, match=match):
        parse_run_config(good)


def test_unknown_hook_and_model_named(good):
    good["optimizer"] = {"hooks": [{"name": "no-such-hook"}]}
    with pytest.raises(UnknownNameError, match="optimizer hook 'no-such-hook'"):
        parse_run_config(good)
    good["optimizer"] = {}
    good["model"]["name"] = "dpot-tiny"
    with pytest.raises(UnknownNameError, match="dpot-ti"):
        parse_run_config(good)


def test_yaml_config_and_overrides(tmp_path, good):
    import yaml

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(good))
    cfg = load_run_config(path, {"training.steps": 3, "optimizer.lr": 2e-3})
    assert cfg.training.steps == 3 and cfg.optimizer.lr == 2e-3
    path.write_text("training: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(path)


def test_cli_rejects_bad_config_before_training(tmp_path, good, capsys):
    from opzoo.cli import main

    good["training"]["steps"] = -1
    out = tmp_path / "out"
    assert main(["pretrain", str(write_json(tmp_path / "bad.json", good))]) == 2
    assert "training.steps must be >= 1, got -1" in capsys.readouterr().err
    assert not out.exists()  # nothing was created


def test_generate_spec_checked(good):
    good["data"]["datasets"][0].update(path="/tmp/opzoo-never-made.h5", generate={"kind": "nss", "n": 4})
    with pytest.raises(ConfigError, match=r"datasets\[0\]\.generate\.kind: 'nss' is not a generator; known: .*ns"):
        parse_run_config(good)
    good["data"]["datasets"][0]["generate"] = {"kind": "ns", "n": 4, "viscosity": 1e-3}
    with pytest.raises(ConfigError, match=r"unknown ns generator argument\(s\) 'viscosity'; accepted: .*nu"):
        parse_run_config(good)
    good["data"]["datasets"][0]["generate"] = {"kind": "ns", "n": 4, "nu": 1e-3, "res": 16}
    cfg = parse_run_config(good)  # a missing path with a generate entry is fine: it is made first
    assert cfg.data.datasets[0].generate["kind"] == "ns"


def test_example_configs_parse(monkeypatch, tmp_path):
    """configs/micro-pot.yaml is valid and builds a micro POT of a few hundred thousand parameters."""
    from pathlib import Path

    import torch

    import opzoo

    monkeypatch.chdir(tmp_path)  # its data paths do not exist here; they have generate entries
    cfg = load_run_config(Path(__file__).resolve().parents[2] / "configs" / "micro-pot.yaml")
    with torch.device("meta"):
        model = opzoo.create_model(cfg.model.name, **cfg.model.args)
    assert 200_000 <= sum(p.numel() for p in model.parameters()) <= 500_000
    assert [d.generate["kind"] for d in cfg.data.datasets] == ["ns", "swe"]

"""Config values that do harm are refused where the config is built, in one line naming the field (issue 34:
F6, F14, D3, D4, D18, D19): a fuzz over config.json's model_args and the run config's values."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import yaml

import opzoo
from opzoo.cli import main

NASTY = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "zero": 0, "negative": -1,
         "huge": 1e308, "string": "x", "list": [1], "object": {"a": 1}, "null": None}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return opzoo.load("dpot-micro").save_pretrained(tmp_path_factory.mktemp("repo") / "m")


def _deep(n: int) -> str:
    return "[" * n + "]" * n


# every value here must be refused for that field (0 is fine for none of them)
MODEL_CASES = [(field, label) for field in ("width", "depth", "patch_size", "mlp_ratio", "in_channels", "img_size",
                                            "n_cls", "out_layer_dim") for label in NASTY]
MODEL_CASES += [("mixer_args.n_blocks", "zero"), ("mixer_args.modes", "negative"), ("img_size", "huge-list")]


def _run_info(capsys, path) -> tuple[int, str]:
    code = main(["info", str(path)])
    return code, capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("field,label", MODEL_CASES)
def test_config_json_values_that_do_harm_are_one_line(repo, field, label, capsys, tmp_path):
    doc = json.loads((repo / "config.json").read_text())
    args = doc["model_args"]
    value = [1_000_000, 1_000_000] if label == "huge-list" else NASTY[label]
    if "." in field:
        outer, inner = field.split(".")
        args[outer][inner] = value
    else:
        args[field] = value
    path = tmp_path / "m"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(doc))  # json writes NaN/Infinity, as a careless tool would
    (path / "model.safetensors").symlink_to(repo / "model.safetensors")
    t0 = time.monotonic()
    code, err = _run_info(capsys, path)
    assert code == 2, (field, label, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert field.split(".")[-1] in err, err
    assert time.monotonic() - t0 < 20  # refused by its estimate, not by trying to allocate


def test_deeply_nested_config_json_is_one_line(repo, tmp_path, capsys):
    path = tmp_path / "m"
    path.mkdir()
    (path / "config.json").write_text('{"architecture": "pot", "model_args": ' + _deep(100_000) + "}")
    (path / "model.safetensors").symlink_to(repo / "model.safetensors")
    code, err = _run_info(capsys, path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nested too deeply" in err


def test_depth_of_a_billion_is_refused_by_its_estimate(capsys):
    """F6: model_args.depth 1e9 allocated until memory ran out; width 1e5 tried to allocate terabytes."""
    for override, words in (("depth=1000000000", "extrapolated along depth"), ("width=100000", "width=100000")):
        t0 = time.monotonic()
        assert main(["info", "dpot-micro", "--set", override]) == 2
        err = capsys.readouterr().err
        assert words in err and "allow_oversize=True" in err and len(err.strip().splitlines()) == 1, err
        assert time.monotonic() - t0 < 20
    with torch_meta():
        assert opzoo.load("dpot-micro", width=8192, allow_oversize=True).config.width == 8192


def torch_meta():
    import torch

    return torch.device("meta")


# ---- the run config --------------------------------------------------------------------------------------
RUN_CASES = [
    ("optimizer.grad_clip", [-1, 0, "nan", "inf"]),  # F14: -1 turned training into gradient ascent
    ("optimizer.lr", [0, -1, "nan", "inf", 1e308]),
    ("optimizer.eps", [0, -1e-8, "nan"]),
    ("optimizer.weight_decay", [-1e-4, "nan", "inf"]),
    ("optimizer.betas", [[0.9, 1.0], [1.5, 0.9], [0.9], "x"]),
    ("schedule.div_factor", [0, -1, "nan"]),
    ("schedule.final_div_factor", [0, -1e4, "inf"]),  # D19: a negative final_div_factor made the lr negative
    ("training.noise_scale", ["nan", -1, "inf"]),
    ("training.steps", [0, -1, 1.5, "x"]),
    ("training.batch_size", [0, -2, 1e8, "x"]),
    ("seed", [1e20, -1, 2**70, "x"]),
    ("data.resolution", [[0, 0], [-1, 32], "x"]),
]


@pytest.fixture(scope="module")
def run_yaml(tmp_path_factory):
    root = tmp_path_factory.mktemp("cfg")
    data = np.random.default_rng(0).standard_normal((4, 16, 16, 6, 1)).astype(np.float32)
    import h5py

    with h5py.File(root / "d.h5", "w") as f:
        f["data"] = data
    base = {"output_dir": str(root / "run"), "model": {"name": "simple-op"},
            "data": {"datasets": [{"path": str(root / "d.h5"), "test_fraction": 0.5}]},
            "training": {"steps": 1, "batch_size": 2}}
    return root, base


def _set(doc: dict, dotted: str, value) -> dict:
    doc = json.loads(json.dumps(doc))
    node = doc
    *parents, leaf = dotted.split(".")
    for k in parents:
        node = node.setdefault(k, {})
    node[leaf] = {"nan": float("nan"), "inf": float("inf")}.get(value, value) if isinstance(value, str) else value
    return doc


@pytest.mark.parametrize("field,value", [(f, v) for f, values in RUN_CASES for v in values],
                         ids=[f"{f}={v}" for f, values in RUN_CASES for v in values])
def test_run_config_values_that_do_harm_are_one_line(run_yaml, field, value, capsys):
    root, base = run_yaml
    path = root / f"{field}-{abs(hash(str(value)))}.yaml"
    path.write_text(yaml.safe_dump(_set(base, field, value)))
    code = main(["pretrain", str(path)])
    err = capsys.readouterr().err
    assert code == 2, (field, value, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert field.split(".")[-1] in err, err
    assert not (root / "run" / "model").exists()


@pytest.mark.slow
def test_a_deeply_nested_run_config_is_one_line(run_yaml, capsys):
    root, _ = run_yaml
    (root / "deep.yaml").write_text("a: " + "[" * 50_000 + "]" * 50_000)
    assert main(["pretrain", str(root / "deep.yaml")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "deep.yaml" in err


def test_nan_bounds_are_finite_numbers():
    from opzoo.config import coerce_value

    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(opzoo.ConfigError, match="must be a finite number"):
            coerce_value(bad, float, "x")

import dataclasses
import json
from typing import Any, Literal, Optional

import pytest

import opzoo
from opzoo.config import ModelConfig, config_document, read_config, write_config


@dataclasses.dataclass
class DemoConfig(ModelConfig):
    width: int = 8
    ratio: float = 1.5
    name: str = "x"
    flag: bool = False
    img: tuple[int, ...] = (64, 64)
    pair: tuple[int, int] = (1, 2)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    maybe: Optional[int] = None
    kind: Literal["a", "b"] = "a"


def test_round_trip_through_json(tmp_path):
    cfg = DemoConfig(width=3, ratio=2.0, img=(16, 32), extra={"k": [1, 2]}, maybe=5, kind="b")
    path = tmp_path / "config.json"
    write_config(path, config_document("demo", cfg, {"resolution": [16, 32]}))
    doc = read_config(path)
    assert doc["architecture"] == "demo" and doc["opzoo_version"] == opzoo.__version__
    assert doc["pretrained_cfg"] == {"resolution": [16, 32]}
    back = DemoConfig.from_dict(doc["model_args"])
    assert back == cfg and isinstance(back.img, tuple)


def test_int_accepted_for_float_but_not_bool_for_int():
    assert DemoConfig.from_dict({"ratio": 3}).ratio == 3.0
    with pytest.raises(opzoo.ConfigError, match=r"model_args.width: expected int, got True"):
        DemoConfig.from_dict({"width": True})


@pytest.mark.parametrize(
    "args, message",
    [
        ({"widht": 3}, r"unknown field\(s\) 'widht' for DemoConfig; known fields: .*width"),
        ({"width": "8"}, r"model_args.width: expected int, got '8' \(str\)"),
        ({"img": [64, "a"]}, r"model_args.img\[1\]: expected int"),
        ({"pair": [1, 2, 3]}, r"model_args.pair: expected 2 items, got 3"),
        ({"kind": "c"}, r"model_args.kind: expected one of \['a', 'b'\], got 'c'"),
        ({"maybe": 1.5}, r"model_args.maybe: expected"),
        ({"flag": 1}, r"model_args.flag: expected bool, got 1"),
    ],
)
def test_bad_fields_are_named(args, message):
    with pytest.raises(opzoo.ConfigError, match=message):
        DemoConfig.from_dict(args)


def _write(path, **doc):
    base = {"architecture": "simple", "opzoo_version": opzoo.__version__, "model_args": {}}
    base.update(doc)
    path.write_text(json.dumps(base))
    return path


def test_newer_major_version_is_refused(tmp_path):
    path = _write(tmp_path / "config.json", opzoo_version="99.0.0")
    with pytest.raises(opzoo.ConfigError, match=r"config.json: written by opzoo 99.0.0, a newer major version"):
        read_config(path)


def test_same_major_newer_minor_loads(tmp_path):
    major = opzoo.__version__.split(".")[0]
    read_config(_write(tmp_path / "config.json", opzoo_version=f"{major}.999.0"))


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"architecture": 3}, r"key 'architecture' must be str, got int"),
        ({"model_args": []}, r"key 'model_args' must be dict"),
        ({"surprise": 1}, r"unknown key\(s\) 'surprise'"),
    ],
)
def test_bad_envelope_is_named(tmp_path, doc, message):
    with pytest.raises(opzoo.ConfigError, match=message):
        read_config(_write(tmp_path / "config.json", **doc))


def test_missing_key_and_bad_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architecture": "simple", "opzoo_version": "0.1.0"}))
    with pytest.raises(opzoo.ConfigError, match="missing key 'model_args'"):
        read_config(p)
    p.write_text("{not json")
    with pytest.raises(opzoo.ConfigError, match="not valid JSON"):
        read_config(p)


def test_overrides_are_type_checked():
    with pytest.raises(opzoo.ConfigError, match=r"override of simple-op.width: expected int"):
        opzoo.load("simple-op", width="wide")
    with pytest.raises(opzoo.ConfigError, match=r"unknown field\(s\) 'widht'"):
        opzoo.load("simple-op", widht=3)
    assert opzoo.load("simple-op", width=8).config.width == 8

"""One parser of model references (issue 36): every caller asks opzoo.model_io.reference, and no other module spells
the prefixes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import opzoo
from opzoo.model_io.reference import parse_model_reference

ROOT = Path(opzoo.__file__).parent


def test_each_kind_of_reference(tmp_path, monkeypatch):
    opzoo.load("simple-op").save_pretrained(tmp_path / "me" / "m")
    monkeypatch.chdir(tmp_path)
    assert parse_model_reference("simple-op").kind == "preset" and parse_model_reference("simple-op").preset == "simple-op"
    hub = parse_model_reference("hf-hub:me/m@v1")
    assert (hub.kind, hub.repo_id, hub.revision, hub.saved, hub.base_model_id) == ("hub", "me/m", "v1", True, "me/m")
    local = parse_model_reference("me/m")
    assert (local.kind, local.path, local.base_model_id) == ("dir", Path("me/m"), "m")
    assert parse_model_reference("local-dir:me/m").kind == "dir"
    assert parse_model_reference("pot").kind == "backbone"
    with pytest.raises(opzoo.UnknownNameError):
        parse_model_reference("pot", backbones=False)
    with pytest.raises(opzoo.HubError, match="no such directory"):
        parse_model_reference("me/typo")
    with pytest.raises(opzoo.HubError, match="is not a directory"):
        parse_model_reference("local-dir:me/typo")
    with pytest.raises(opzoo.UnknownNameError, match="simple-po"):
        parse_model_reference("simple-po")


def test_no_other_module_spells_the_prefixes():
    spelled = []
    for path in ROOT.rglob("*.py"):
        for literal in re.findall(r"""["'](hf-hub:|local-dir:)""", path.read_text()):
            spelled.append(f"{path.relative_to(ROOT)}: {literal}")
    assert all(s.startswith("host/registry.py") for s in spelled), spelled

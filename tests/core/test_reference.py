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
    assert all(s.startswith("registry/registry.py") for s in spelled), spelled


def test_load_create_model_and_from_pretrained_share_one_grammar(tmp_path, monkeypatch):
    """Issue 44: ``opzoo.load("pot")`` failed while ``create_model("pot")`` built it, and ``from_pretrained("org/name")``
    went to the Hub through a second parser while ``load("org/name")`` said "no such directory". Now one parser
    serves all three; the one difference is a documented argument (``bare_repo_ids``: huggingface_hub's
    ``from_pretrained`` convention)."""
    import torch

    torch.manual_seed(0)
    built = opzoo.load("pot", width=32, depth=1)
    assert built.training and type(built) is type(opzoo.create_model("pot", width=32, depth=1))
    with pytest.raises(opzoo.HubError, match="'pot' is a bare backbone and has no weights"):
        opzoo.load("pot", pretrained=True)
    # a preset is the same model by every name
    assert opzoo.create_model("simple-op").config == opzoo.load("simple-op").config
    with pytest.raises(opzoo.HubError, match="preset 'simple-op' has no published weights"):
        opzoo.from_pretrained("simple-op")  # from_pretrained of a preset: its published weights
    # org/name: a Hub repo for from_pretrained (bare_repo_ids), a typo'd directory for load
    assert parse_model_reference("org/name", bare_repo_ids=True).repo_id == "org/name"
    with pytest.raises(opzoo.HubError, match="a Hub repo is named hf-hub:org/name"):
        opzoo.load("org/name")
    opzoo.load("simple-op").save_pretrained(tmp_path / "org" / "name")
    monkeypatch.chdir(tmp_path)
    for ref in (parse_model_reference("org/name", bare_repo_ids=True), parse_model_reference("org/name")):
        assert ref.kind == "dir"  # an existing directory wins, as huggingface_hub's from_pretrained does
    assert opzoo.from_pretrained("org/name").config == opzoo.load("org/name").config
    assert not opzoo.from_pretrained("org/name").training
    with pytest.raises(opzoo.ConfigError, match="revision applies to Hub repos"):
        opzoo.from_pretrained("simple-op", revision="v1")
    # a parsed reference is a value every entry point takes, parsed no more
    ref = parse_model_reference("org/name")
    assert opzoo.load(ref).config == opzoo.from_pretrained(ref).config

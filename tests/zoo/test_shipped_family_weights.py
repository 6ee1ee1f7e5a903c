"""Issue 70, item 9: weights a family ships itself (in its package, in its upstream's format) are rows of its table
(`CheckpointFamily(directory=...)`): `pretrained=True` loads them through the family's converter and load checks,
and `checkpoint_path=` reaches the same converter."""

import pytest
import torch

import opzoo
from opzoo.registry.registry import get_registry

from . import test_conformance as conformance  # a module: pytest would collect an imported Test class again


@pytest.fixture
def registry(monkeypatch):
    """The live registry, its tables copied for this test: what it registers is gone afterwards."""
    registry = get_registry()
    for table in ("_presets", "_aliases", "_families"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    return registry


def test_a_family_that_ships_its_weights_loads_them_through_its_converter(registry, tmp_path):
    suite = conformance.TestMorph()
    model = suite.tiny_model(seed=3).eval()
    shipped = tmp_path / "pkg" / "weights"
    shipped.mkdir(parents=True)
    path = suite.write_upstream(model, shipped / "morph-tiny", lambda state: None)
    morph = registry.family("morph")
    family = opzoo.CheckpointFamily(
        "morph-shipped", backbone=morph.backbone, args={**morph.args, **suite.tiny}, converter=morph.converter,
        directory=shipped, variants=(opzoo.Variant("morph-shipped-tiny", weights=path.name,
                                                     converter_options={"heads": suite.tiny["heads"]}),),
        checks=morph.checks, contract=morph.contract, card=morph.card, card_fields=lambda v: {},
        provenance=())
    registry.register_family(family)
    source = registry.preset("morph-shipped-tiny").pretrained
    assert source.directory == shipped and source.converter == "morph" and source.filename == path.name

    x = suite.example_input(model)
    loaded = opzoo.load("morph-shipped-tiny", pretrained=True)
    assert not loaded.training
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    other = tmp_path / "elsewhere.pth"
    other.write_bytes(path.read_bytes())
    by_path = opzoo.load("morph-shipped-tiny", checkpoint_path=other)  # the converter is reachable: no download page
    assert all(torch.equal(by_path.state_dict()[k], v) for k, v in model.state_dict().items())


def test_a_family_names_one_place_for_its_weights():
    with pytest.raises(ValueError, match="give one of repo_id"):
        opzoo.CheckpointFamily("x", backbone="simple", variants=(opzoo.Variant("x-s", weights="w.pth"),),
                               repo_id="org/x", directory="weights")

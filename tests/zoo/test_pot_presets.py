"""Every POT preset of the first-party plugins keeps its config and parameter count (golden/pot_presets.json)."""

import json
from pathlib import Path

import torch

import opzoo

GOLDEN = Path(__file__).parent / "golden" / "pot_presets.json"


NEW_FIELDS = {"block_args": {}, "feedforward": "mlp", "feedforward_args": {}}


def test_every_pot_preset_keeps_its_config_and_parameters():
    """The table was written by the commit before blocks and feed-forwards became components."""
    golden = json.loads(GOLDEN.read_text())
    for name, before in golden.items():
        with torch.device("meta"):
            model = opzoo.load(name)
        assert model.config.to_dict() == {**before["config"], **NEW_FIELDS}, name
        assert {k: list(v.shape) for k, v in model.state_dict().items()} == before["params"], name


def test_a_config_written_before_the_new_fields_loads_with_their_defaults():
    golden = json.loads(GOLDEN.read_text())
    config = opzoo.PotConfig.from_dict(golden["aot-pot-t"]["config"])
    assert (config.block, config.feedforward, config.block_args, config.feedforward_args) == ("sandwich", "mlp", {}, {})

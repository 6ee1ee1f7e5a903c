"""The presets: registered names, exact parameter counts (meta device), config-only hybrid, cards,
and alpha / beta from model args."""

import pytest
import torch

import opzoo
from opzoo.contracts.routing import aux_losses

from ..training.conftest import micro_pot_args

COUNTS = {"nestor-ti": 66_443_395, "nestor-s": 383_688_363, "aot-moe-pot-t": 16_349_471}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_preset_parameter_counts_on_meta(name):
    with torch.device("meta"):
        model = opzoo.load(name)
    assert sum(p.numel() for p in model.parameters()) == COUNTS[name]


def test_aliases_and_the_hybrid_is_config_only():
    assert opzoo.load("nestor-t", **micro_pot_args()).config.block == "nestor"
    cfg = opzoo.get_registry().preset("aot-moe-pot-ti").args
    assert (cfg["block"], cfg["residual"], cfg["feedforward"]) == ("sandwich", "aot", "moe")
    assert cfg["feedforward_args"] == {"num_experts": 4, "top_k": 2, "num_shared": 1, "aux_weight": 0.01}
    dims = {k: v for k, v in opzoo.get_registry().preset("aot-pot-t").args.items() if k not in ("feedforward", "feedforward_args")}
    assert dims == {k: v for k, v in cfg.items() if k not in ("feedforward", "feedforward_args")}  # aot-pot-t otherwise


def test_alpha_and_beta_come_from_model_args():
    torch.manual_seed(0)
    model = opzoo.load("nestor-ti", **micro_pot_args(), block_args={"alpha": 0.5, "beta": 0.25})
    model(torch.randn(2, 16, 16, 4, 2))
    parts = aux_losses(model)
    assert set(parts) == {"image", "token"}
    torch.testing.assert_close(model.aux_loss(), 0.5 * parts["image"] + 0.25 * parts["token"])
    assert model.blocks[0].router.top_k == 1 and model.blocks[0].experts[0].ffn.router.top_k == 2  # defaults kept


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_model_card_renders(tmp_path, name):
    model = opzoo.load(name, **micro_pot_args())
    model.save_pretrained(tmp_path / name)
    text = (tmp_path / name / "README.md").read_text()
    assert text.startswith("---\nlibrary_name: opzoo")
    for section in ("## Description", "## Architecture", "## Parameters", "## Training data", "## Evaluation",
                    "## Intended use and limits", "## Citation", "## Usage"):
        assert section in text, section
    assert "${" not in text

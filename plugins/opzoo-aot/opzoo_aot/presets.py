"""The aot-pot-* presets: the POT backbone with sandwich blocks and AOT residuals (docs/models.md §3)."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo.micro import micro_pretrained_cfg, micro_results
from opzoo_fourier import dpot_micro_preset_args, dpot_preset_args

CARDS = files("opzoo_aot") / "model_cards"

# the paper's AOT hyper-parameters: n = 4 streams, 20 Sinkhorn iterations, gate init α = 0.01
AOT_RESIDUAL_ARGS = dict(n=4, sinkhorn_iters=20, alpha=0.01)

# preset: its row of the POT size table (opzoo.POT_SIZES) — DPOT's dims
AOT_POT_SIZES = {"aot-pot-t": "Ti", "aot-pot-s": "S", "aot-pot-m": "M", "aot-pot-l": "L"}
ALIASES = {"aot-pot-t": ("aot-pot-ti",)}

# aot-pot-micro: dpot-micro's dims and setup (opzoo_fourier.dpot_micro_preset_args) with sandwich blocks and
# AOT residuals, pretrained by opzoo on its synthetic suite (configs/micro/aot-pot-micro.yaml) with
# the same data, budget and seed; the weights ship in this package (pretrained/aot-pot-micro/)


def aot_pot_args(name: str) -> dict:
    """The POT config of preset ``name``: DPOT's network (opzoo-fourier) with sandwich blocks and AOT residuals."""
    return dpot_preset_args(AOT_POT_SIZES[name], block="sandwich", residual="aot", residual_args=dict(AOT_RESIDUAL_ARGS))


def register_presets(registry) -> None:
    for name in AOT_POT_SIZES:
        registry.register_model(
            name,
            backbone="pot",
            args=aot_pot_args(name),
            card=CARDS / f"{name}.md",
            pretrained_cfg=dict(channels=4, resolution=[128, 128], in_timesteps=10),
            aliases=ALIASES.get(name, ()),
        )
    registry.register_model(
        "aot-pot-micro",
        backbone="pot",
        args=dpot_micro_preset_args(block="sandwich", residual="aot", residual_args=dict(AOT_RESIDUAL_ARGS)),
        pretrained=opzoo.PretrainedSource.package("opzoo_aot", "pretrained/aot-pot-micro"),
        card=CARDS / "aot-pot-micro.md",
        pretrained_cfg=micro_pretrained_cfg(),
        results=micro_results(files("opzoo_aot") / "pretrained" / "aot-pot-micro" / "eval.json"),
    )

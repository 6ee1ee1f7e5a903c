"""The nestor-* and aot-moe-pot-t presets (docs/models.md §4; AOT-POT paper App. C.13)."""

from __future__ import annotations

from importlib.resources import files

from opzoo_aot.presets import AOT_RESIDUAL_ARGS
from opzoo_fourier import dpot_preset_args

CARDS = files("opzoo_moe") / "model_cards"

# defaults where the papers are silent (docs/models.md §4): N = 4 image experts top-1, M = 4 token experts
# top-2 plus one shared MLP expert, alpha = beta = 0.01
NESTOR_BLOCK_ARGS = dict(n_experts=4, top_k=1, alpha=0.01, sub_experts=4, sub_top_k=2, sub_shared=1, beta=0.01)
MOE_FFN_ARGS = dict(num_experts=4, top_k=2, num_shared=1, aux_weight=0.01)

# preset: its row of the POT size table (opzoo.POT_SIZES) — DPOT-Ti/S dims
SIZES = {"nestor-ti": "Ti", "nestor-s": "S", "aot-moe-pot-t": "Ti"}
ALIASES = {"nestor-ti": ("nestor-t",), "aot-moe-pot-t": ("aot-moe-pot-ti",)}


def preset_args(name: str) -> dict:
    """The POT config of preset ``name``."""
    if name.startswith("nestor"):
        return dpot_preset_args(SIZES[name], block="nestor", block_args=dict(NESTOR_BLOCK_ARGS))
    return dpot_preset_args(SIZES[name], block="sandwich", residual="aot", residual_args=dict(AOT_RESIDUAL_ARGS),
                            feedforward="moe", feedforward_args=dict(MOE_FFN_ARGS))


def register_presets(registry) -> None:
    for name in SIZES:
        registry.register_model(name, backbone="pot", args=preset_args(name), card=CARDS / f"{name}.md",
                                pretrained_cfg=dict(channels=4, resolution=[128, 128], in_timesteps=10),
                                aliases=ALIASES.get(name, ()))

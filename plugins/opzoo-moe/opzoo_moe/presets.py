"""The nestor-* and aot-moe-pot-t presets (docs/models.md §4; AOT-POT paper App. C.13)."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo_aot.presets import AOT_RESIDUAL_ARGS
from opzoo_fourier import DPOT, dpot_preset_args

CARDS = files("opzoo_moe") / "model_cards"

# defaults where the papers are silent (docs/models.md §4): N = 4 image experts top-1, M = 4 token experts
# top-2 plus one shared MLP expert, alpha = beta = 0.01
NESTOR_BLOCK_ARGS = dict(n_experts=4, top_k=1, alpha=0.01, sub_experts=4, sub_top_k=2, sub_shared=1, beta=0.01)
MOE_FFN_ARGS = dict(num_experts=4, top_k=2, num_shared=1, aux_weight=0.01)

PRETRAINED_CFG = dict(channels=4, resolution=[128, 128], in_timesteps=10)


def nestor_row(name: str, size: str, word: str, params: str, active: str, speed: str,
               aliases: tuple[str, ...] = ()) -> opzoo.Variant:
    """NESTOR at POT size ``size`` (DPOT's dims), with its counts as registered (all, and active per sample) and the
    measured training-step cost beside DPOT's (docs/benchmarks.md)."""
    return opzoo.Variant(name, args=dpot_preset_args(size, block="nestor", block_args=dict(NESTOR_BLOCK_ARGS)),
                         aliases=aliases, data={"word": word, "size": size, "params": int(params.replace(",", "")),
                                                "active": active, "speed": speed, "dpot": "dpot-" + size.lower()})


def nestor_card_fields(v: opzoo.Variant) -> dict:
    a = v.args
    return {"size_word": v["word"], "size": v["size"], "width": a["width"], "blocks": a["depth"],
            "fourier_heads": DPOT.variant(v["dpot"]).args["mixer_args"]["n_blocks"], "heads": a["width"] // 64,
            "hidden": int(a["width"] * a["mlp_ratio"]), "params": f"{v['params']:,}", "active": v["active"],
            "dpot": v["dpot"], "dpot_params": DPOT.variant(v["dpot"])["official"], "speed": v["speed"]}


# NESTOR (ICLR 2026 submission; docs/models.md §4) at DPOT-Ti's and DPOT-S's dims; no weights are published
NESTOR = opzoo.CheckpointFamily(
    "nestor", backbone="pot", args={},
    variants=(
        nestor_row("nestor-ti", "Ti", "Tiny (alias `nestor-t`)", "66,443,395", "18,065,491",
                   "a training step costs about 2.5x dpot-ti's at batch 8, 64x64 (2.3-2.6x across\nruns on a shared "
                   "2-core CPU); its extra matmul work alone (32 GFLOP per step) sets a floor of ~2.3x there.",
                   aliases=("nestor-t",)),
        nestor_row("nestor-s", "S", "Small", "383,688,363", "93,851,235",
                   "not measured at this size (the benchmark compares nestor-ti with dpot-ti)."),
    ),
    pretrained_cfg=PRETRAINED_CFG, card=CARDS / "nestor.md", card_fields=nestor_card_fields,
)


def register_presets(registry) -> None:
    registry.register_family(NESTOR)
    registry.register_model(  # AOT-POT-T with MoE feed-forwards (AOT-POT paper App. C.13)
        "aot-moe-pot-t", backbone="pot", aliases=("aot-moe-pot-ti",), card=CARDS / "aot-moe-pot-t.md",
        args=dpot_preset_args("Ti", block="sandwich", residual="aot", residual_args=dict(AOT_RESIDUAL_ARGS),
                              feedforward="moe", feedforward_args=dict(MOE_FFN_ARGS)),
        pretrained_cfg=PRETRAINED_CFG)

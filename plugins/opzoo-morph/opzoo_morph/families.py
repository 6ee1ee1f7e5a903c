"""MORPH's foundation checkpoints as one table: each row is a preset, and its weights source, load check,
provenance, ``pretrained_cfg`` and card are derived from it by the rules in ``provenance.py`` and ``checks.py``.

Rows: lanl/MORPH ``scripts/finetune_MORPH_general.py`` @ a16d5c4 (the file of each size in ``models/FM``) and
``config/argument_parser.py`` @ a16d5c4 (``MORPH_MODELS``: the sizes; the L size's "~480M" note)."""

from __future__ import annotations

from importlib.resources import files

import opzoo

from .checks import tensors_agree
from .converter import SIZES
from .network import parameter_count
from .provenance import CONTRACT, HUB_REPO, HUB_SUBFOLDER, card_fields, facts, pretrained_cfg

CARDS = files("opzoo_morph") / "model_cards"
FM = {"patch_size": 8, "max_patches": 4096, "max_fields": 3, "max_components": 3, "heads_xa": 32}


def row(name: str, size: str, file: str, epochs: int, max_ar: int, published_params: str) -> opzoo.Variant:
    args = {**SIZES[size], "max_ar": max_ar, **({"time_positions": "interpolate"} if max_ar > 1 else {})}
    # what the tensors cannot tell goes to the converter from the row (upstream's table and pretraining script)
    told = {"heads": args["heads"], "heads_xa": FM["heads_xa"], "time_positions": args.get("time_positions", "slice")}
    return opzoo.Variant(name, args=args, weights=f"{HUB_SUBFOLDER}/{file}", converter_options=told,
                         data={"size": size, "file": file, "epochs": epochs, "max_ar": max_ar,
                               "published_params": published_params,
                               "params": parameter_count(**FM, **args)})


MORPH = opzoo.CheckpointFamily(
    "morph", backbone="morph", args=FM, repo_id=HUB_REPO, converter="morph",
    variants=(
        #   preset     size  file in models/FM                             epoch max_ar published
        row("morph-ti", "Ti", "morph-Ti-FM-max_ar1_ep225.pth", 225, 1, "not stated"),
        row("morph-s", "S", "morph-S-FM-max_ar1_ep225.pth", 225, 1, "not stated"),
        row("morph-m", "M", "morph-M-FM-max_ar1_ep290_latestbatch.pth", 290, 1, "not stated"),
        row("morph-l", "L", "morph-L-FM-max_ar16_ep189_latestbatch.pth", 189, 16, "~480M (with AR1:16)"),
    ),
    checks=(tensors_agree(),), provenance=facts, pretrained_cfg=lambda v: pretrained_cfg(v.name),
    card=CARDS / "morph.md", card_fields=card_fields, contract=CONTRACT,
)

FAMILIES = (MORPH,)

"""PDE-Transformer's published checkpoints, one table per family (mixed and separate channels): each row is a preset,
and its weights source, load check, provenance, ``pretrained_cfg``, reported result and card are derived from it by
the rules in ``provenance.py`` and the load check in ``converter.py``; the plugin's entry point is :data:`PLUGIN`. Adding a checkpoint is adding a row.

Rows: tum-pbs/pde-transformer ``docs/pretrained-weights.md`` @ 850e09d (the Hub subfolders, the authors' parameter
counts and nRMSE after 1 and 10 autoregressive steps on the pretraining datasets); sizes are pdetransformer's
``PDE_S/B/L`` (``backbones.SIZES``)."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo.micro import micro_contract, micro_preset, suite_statistics

from .backbones import DEPTH, SIZES, PdetMixedChannels
from .converter import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    build_pdetransformer,
    build_pdetransformer_separate,
    config_agrees,
    convert_pde_transformer,
)
from .provenance import HUB_REPO, card_fields, contract, mixed_facts, pretrained_cfg, reported_result, separate_facts
from .separate_backbone import PdetSeparateChannels

CARDS = files("opzoo_pdet") / "model_cards"
SHARED_ARGS = {"depth": list(DEPTH), "in_channels": 2, "out_channels": 2, "periodic": True,
               "normalization": "zscore"}  # with each file's statistics (the fit's), as pretrained per dataset


def row(name: str, subfolder: str, size: str, size_word: str, nrmse: tuple[float, float], params: str) -> opzoo.Variant:
    return opzoo.Variant(name, args=SIZES[size], weights=f"{subfolder}/{WEIGHTS_FILE}",
                         extra_files=(f"{subfolder}/{CONFIG_FILE}",),
                         data={"subfolder": subfolder, "size": size, "size_word": size_word, "nrmse": nrmse,
                               "published_params": params})


def family(name: str, provenance, *rows: opzoo.Variant) -> opzoo.CheckpointFamily:
    """One network's table (``pdet-mc`` or ``pdet-sc``): its rows and facts; every other rule is the name's."""
    return opzoo.CheckpointFamily(
        name, backbone=name, args=SHARED_ARGS, repo_id=HUB_REPO, converter="pde-transformer", variants=rows,
        checks=lambda v: (config_agrees(v["subfolder"], name),), provenance=provenance, results=reported_result,
        pretrained_cfg=pretrained_cfg(name), card=CARDS / f"{name}.md", card_fields=card_fields,
        contract=contract(name))


MIXED = family(
    "pdet-mc", mixed_facts,
    #   preset       subfolder  size     size       nRMSE1, nRMSE10  authors' params
    row("pdet-mc-s", "mc-s", "PDE-S", "Small", (0.044, 0.36), "~33M"),
    row("pdet-mc-b", "mc-b", "PDE-B", "Base", (0.038, 0.31), "~130M"),
    row("pdet-mc-l", "mc-l", "PDE-L", "Large", (0.034, 0.27), "~518M"),
)

SEPARATE = family(
    "pdet-sc", separate_facts,
    row("pdet-sc-s", "sc-s", "PDE-S", "Small", (0.043, 0.34), "~46M"),
    row("pdet-sc-b", "sc-b", "PDE-B", "Base", (0.037, 0.29), "~178M"),
    row("pdet-sc-l", "sc-l", "PDE-L", "Large", (0.034, 0.26), "~701M"),
)

# opzoo's own mixed-channel PDE-Transformer at micro dims, pretrained on the micro suite
# (configs/micro/pdet-mc-micro.yaml, docs/micro.md); one class, so every sample takes the "no label" class
MICRO = micro_preset(
    "pdet-mc-micro", backbone="pdet-mc", package="opzoo_pdet", in_timesteps=1,
    args={"hidden_size": 24, "depth": [1, 1, 2, 1, 1], "num_heads": 2, "window_size": 4, "patch_size": 4,
          "num_classes": 1, "max_hidden_size": 128, "periodic": True, "normalization": "zscore"},
    contract=micro_contract(contract("pdet-mc"), grid="any grid that suits its patches 4 and windows 4 (no "
                                                      "resolution-bound embedding); pretrained at 32x32",
                            rollout_note=contract("pdet-mc").rollout_note,
                            normalization=suite_statistics(("mean", "std"), {"none": "none"},
                                                          contract("pdet-mc").normalization.alternatives)))

PLUGIN = opzoo.kit.FamilyPlugin(
    MIXED, SEPARATE, models=(MICRO,), backbones={"pdet-mc": PdetMixedChannels, "pdet-sc": PdetSeparateChannels},
    converters={"pde-transformer": convert_pde_transformer},
    upstreams={"pdetransformer": ("pdet-mc", build_pdetransformer),
               "pdetransformer-separate": ("pdet-sc", build_pdetransformer_separate)})

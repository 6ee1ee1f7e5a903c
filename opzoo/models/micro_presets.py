"""The ``*-micro`` presets of the families outside the POT backbone (Poseidon's scOT, GPhyT, MORPH, PDE-Transformer):
each family's own network at micro dims, pretrained by opzoo with dpot-micro's suite, recipe and budget
(configs/micro/, docs/micro.md), so that every architecture has offline weights to load, fine-tune and compare.

``micro_preset(...)`` gives the keyword arguments of ``registry.register_model`` (a family plugin lists them in
``opzoo.kit.FamilyPlugin(models=...)``); ``micro_contract(...)`` the family's data contract as its micro preset reads
data: the suite's fields by position, 1-field datasets padded with 1.0 (as the suite was pretrained)."""

from __future__ import annotations

import dataclasses
import json
from importlib.resources import files
from typing import Any

from ..registry.contract import DataContract, Normalization
from ..registry.registry import PretrainedSource
from .pot_sizes import micro_pretrained_cfg, micro_results

MICRO_CHANNELS = 2


def micro_contract(contract: DataContract, *, grid: str, normalization: Normalization | None = None,
                   **changes: Any) -> DataContract:
    """``contract`` (the family's) for its micro preset: fields by position in the suite's own values, fewer
    channels padded with 1.0 as in its pretraining (a family that runs at any channel count pads none), no upstream training sets, absent-field rule or note on how upstream's
    data held padded channels (``rollout_note=`` keeps what the network itself does to them), its own grid;
    ``normalization`` where the micro preset normalizes otherwise than the published weights."""
    return dataclasses.replace(
        contract, name=f"{contract.name}-micro", fields=None, training_sets=(), absent=None, absent_source="",
        units="the micro suite's own values (opzoo's generated PDEs: docs/micro.md)",
        **({"pad_value": 1.0, "pad_source": "as its pretraining on the micro suite padded 1-field datasets "
                                             "(configs/micro/)"} if contract.other_fields != "any" else {}),
        other_fields="pad" if contract.other_fields == "subset" else contract.other_fields, subset_config=None,
        normalization=normalization or contract.normalization, grid=grid, **{"rollout_note": "", **changes})


def suite_statistics(config: tuple[str, str], by_config: dict[str, str] | None = None,
                     alternatives: dict[str, str] | None = None) -> Normalization:
    """The micro presets' normalization: each channel z-scored inside the model by constants, by position: the
    statistics of the micro suite's training split (the four datasets together) that its pretraining fitted, kept
    for every file it reads, so that it reads any file as it was pretrained (``config``: its mean and std fields;
    ``by_config``: the kinds other values of the family's switch select)."""
    return Normalization(
        "constants", "each channel z-scored inside the model, by position, by the constants its pretraining fitted "
        "(the statistics of the micro suite's training split, the four datasets together); a channel added in "
        "fine-tuning gets its training split's", config=config, by_config=dict(by_config or {}),
        alternatives=dict(alternatives or {}),
        source="opzoo's micro setup (docs/micro.md): one set of statistics for the whole pretraining mixture",
        breaks="fields far from the suite's scale (mean ~0.26, std ~0.6 per channel)")


def micro_preset(name: str, *, backbone: str, args: dict[str, Any], package: str, contract: DataContract,
                 in_timesteps: int) -> dict[str, Any]:
    """``registry.register_model`` keywords of ``name``: ``backbone`` built with ``args`` at the micro grid and
    channels, its weights, ``config.json`` and ``eval.json`` shipped in ``package/pretrained/<name>/``, its card
    ``package/model_cards/<name>.md``. The config's mean and std fields (``contract.normalization.config``) hold the
    constants the pretraining run fitted, read from the shipped ``config.json`` with the fit's record: a preset's
    weights file holds tensors only, and the network is built from the preset's arguments."""
    shipped = files(package) / "pretrained" / name
    record = json.loads((shipped / "config.json").read_text())
    fitted = {key: record["model_args"][key] for key in contract.normalization.config}
    return dict(
        name=name, backbone=backbone,
        args={"in_channels": MICRO_CHANNELS, "out_channels": MICRO_CHANNELS, **args, **fitted},
        pretrained=PretrainedSource.package(package, f"pretrained/{name}"),
        card=files(package) / "model_cards" / f"{name}.md",
        pretrained_cfg={**micro_pretrained_cfg(), "in_timesteps": in_timesteps,
                        "normalization": record["pretrained_cfg"]["normalization"]},
        results=micro_results(shipped / "eval.json"), contract=contract)


__all__ = ["micro_contract", "micro_preset", "suite_statistics"]

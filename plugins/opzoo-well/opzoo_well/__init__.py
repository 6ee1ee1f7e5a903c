"""opzoo-well: The Well's benchmark architectures (FNO, TFNO, UNetClassic, UNetConvNext) as opzoo
backbones that speak physical units, presets ``well-<model>-<dataset>`` for every published
checkpoint, and the ``the-well`` checkpoint converter (docs/models.md §7)."""

from .architectures import hub_repo, preset_name
from .backbones import (
    WellBackbone,
    WellConfig,
    WellFNO,
    WellFnoConfig,
    WellPretrainedCfg,
    WellTFNO,
    WellUNetClassic,
    WellUNetConvNext,
)
from .converter import convert_the_well
from .datasets import DATASETS, normalization_args


def __getattr__(name: str):  # the tables are read on first use, so that `python -m opzoo_well.family` runs it once
    if name == "checkpoints":
        from .family import checkpoints

        return checkpoints
    raise AttributeError(f"module 'opzoo_well' has no attribute {name!r}")


__all__ = ["WellBackbone", "WellConfig", "WellFNO", "WellFnoConfig", "WellPretrainedCfg", "WellTFNO", "WellUNetClassic",
           "WellUNetConvNext", "convert_the_well", "DATASETS", "normalization_args", "checkpoints", "hub_repo",
           "preset_name"]

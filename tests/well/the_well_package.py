"""The Well's model and trainer modules, imported on first use: they import timm and wandb (about 5 s), which
every pytest worker would otherwise pay while collecting, whether or not it runs a test of The Well."""

from __future__ import annotations

from importlib import import_module

import pytest

pytest.importorskip("the_well.data", reason="The Well's package (the_well, neuraloperator==0.3.0) is not installed; "
                    "`make install` installs it with opzoo's test extra")


class Deferred:
    """``module`` (or its attribute ``name``) imported when one of its attributes is first read."""

    def __init__(self, module: str, name: str | None = None):
        self._module, self._name = module, name

    def __getattr__(self, attr: str):
        if attr.startswith("_"):  # pytest's collection probes a module's names for its own markers
            raise AttributeError(attr)
        target = import_module(self._module)
        return getattr(getattr(target, self._name) if self._name else target, attr)


well_models = Deferred("the_well.benchmark.models")
Trainer = Deferred("the_well.benchmark.trainer.training", "Trainer")
VRMSE = Deferred("the_well.benchmark.metrics", "VRMSE")

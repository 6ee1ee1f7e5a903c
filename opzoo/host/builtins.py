"""The core's own registrations, made through the same hooks as any plugin.

:mod:`opzoo.host.plugins` registers this module first, under the name ``opzoo``; nothing else imports it.
"""

from __future__ import annotations

from importlib.resources import files

from ..contracts.hookspecs import hookimpl
from ..data.readers import LAYOUTS
from ..evaluation.pdebench_metrics import PDEBENCH_METRICS
from ..layers.feedforward import MlpFeedForward
from ..layers.mixers import PointwiseMLPMixer
from ..layers.residual import PlainResidual
from ..models.blocks import DpotBlock, SandwichBlock
from ..models.contracts import POT, SIMPLE
from ..models.pot import PotBackbone
from ..models.simple import SimpleOperator

CARDS = files("opzoo") / "model_cards"


@hookimpl
def opzoo_register_components(registry):
    registry.register_residual("plain", PlainResidual)
    registry.register_mixer("pointwise-mlp", PointwiseMLPMixer)
    registry.register_feedforward("mlp", MlpFeedForward)
    registry.register_block("dpot", DpotBlock)
    registry.register_block("sandwich", SandwichBlock)
    registry.register_backbone("simple", SimpleOperator, contract=SIMPLE)
    registry.register_backbone("pot", PotBackbone, contract=POT)
    for reader in LAYOUTS.values():  # the core's readers, first in detection order
        registry.register_reader(reader)
    for metric in PDEBENCH_METRICS:  # PDEBench's set, first in every table
        registry.register_metric(metric)


@hookimpl
def opzoo_register_models(registry):
    registry.register_model(
        "simple-op",
        backbone="simple",
        args=dict(width=32, depth=2, in_channels=1, out_channels=1, in_timesteps=4),
        card=CARDS / "simple-op.md",
        pretrained_cfg=dict(channels=1, resolution=[32, 32], in_timesteps=4),
    )

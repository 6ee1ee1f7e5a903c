"""The core's own registrations, made through the same hooks as any plugin."""

from __future__ import annotations

from importlib.resources import files

from .backbones.blocks import DpotBlock, SandwichBlock
from .backbones.pot import PotBackbone
from .backbones.simple import SimpleOperator
from .feedforward import MlpFeedForward
from .hookspecs import hookimpl
from .mixers import PointwiseMLPMixer
from .residual import PlainResidual

CARDS = files("opzoo") / "model_cards"


@hookimpl
def opzoo_register_components(registry):
    registry.register_residual("plain", PlainResidual)
    registry.register_mixer("pointwise-mlp", PointwiseMLPMixer)
    registry.register_feedforward("mlp", MlpFeedForward)
    registry.register_block("dpot", DpotBlock)
    registry.register_block("sandwich", SandwichBlock)
    registry.register_backbone("simple", SimpleOperator)
    registry.register_backbone("pot", PotBackbone)


@hookimpl
def opzoo_register_models(registry):
    registry.register_model(
        "simple-op",
        backbone="simple",
        args=dict(width=32, depth=2, in_channels=1, out_channels=1, in_timesteps=4),
        card=CARDS / "simple-op.md",
        pretrained_cfg=dict(channels=1, resolution=[32, 32], in_timesteps=4),
    )

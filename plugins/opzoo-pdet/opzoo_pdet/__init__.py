"""opzoo-pdet: PDE-Transformer (Holzschuh et al., ICML 2025) in opzoo: its mixed- and separate-channel networks as the
``pdet-mc`` and ``pdet-sc`` backbones (physical fields in and out), presets ``pdet-mc-s/b/l`` and ``pdet-sc-s/b/l``
for the published checkpoints and the ``pde-transformer`` converter."""

from .backbones import PdetMixedChannels, PdetMixedConfig, PdetPretrainedCfg
from .converter import convert_pde_transformer
from .mixed_net import MixedChannelNet
from .provenance import FIELDS, TASKS
from .separate_backbone import PdetSeparateChannels, PdetSeparateConfig
from .separate_net import SeparateChannelNet

__all__ = ["PdetMixedChannels", "PdetMixedConfig", "PdetPretrainedCfg", "MixedChannelNet", "SeparateChannelNet",
           "convert_pde_transformer", "TASKS",
           "FIELDS", "PdetSeparateChannels", "PdetSeparateConfig"]

"""Entry point of the opzoo-pdet plugin: its registrations through opzoo's public hooks."""

import opzoo

from .backbones import PdetMixedChannels
from .converter import convert_pde_transformer
from .families import FAMILIES
from .separate_backbone import PdetSeparateChannels
from .upstream import build_pdetransformer, build_pdetransformer_separate


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_backbone("pdet-mc", PdetMixedChannels)
    registry.register_backbone("pdet-sc", PdetSeparateChannels)
    registry.register_converter("pde-transformer", convert_pde_transformer)
    registry.register_upstream("pdetransformer", backbone="pdet-mc", build=build_pdetransformer)
    registry.register_upstream("pdetransformer-separate", backbone="pdet-sc", build=build_pdetransformer_separate)


@opzoo.hookimpl
def opzoo_register_models(registry):
    for family in FAMILIES:
        registry.register_family(family)

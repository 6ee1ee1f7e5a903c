"""Entry point of the opzoo-well plugin: its registrations through opzoo's public hooks."""

import opzoo

from .backbones import BACKBONES
from .converter import convert_the_well
from .families import FAMILIES
from .upstream import build_the_wells_model


@opzoo.hookimpl
def opzoo_register_components(registry):
    for name, cls in BACKBONES.items():
        registry.register_backbone(name, cls)
    registry.register_converter("the-well", convert_the_well)
    for name in BACKBONES:
        registry.register_upstream(f"the_well:{name}", backbone=name, build=build_the_wells_model)


@opzoo.hookimpl
def opzoo_register_models(registry):
    for family in FAMILIES:
        registry.register_family(family)

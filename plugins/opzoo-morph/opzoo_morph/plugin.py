"""Entry point of the opzoo-morph plugin: its registrations through opzoo's public hooks."""

import opzoo

from .backbone import Morph
from .converter import convert_morph
from .families import FAMILIES
from .upstream import build_upstream_morph


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_backbone("morph", Morph)
    registry.register_converter("morph", convert_morph)
    registry.register_upstream("morph", backbone="morph", build=build_upstream_morph)


@opzoo.hookimpl
def opzoo_register_models(registry):
    for family in FAMILIES:
        registry.register_family(family)

"""Entry point of the opzoo-gphyt plugin: its registrations through opzoo's public hooks."""

import opzoo

from .backbone import GPhyT
from .converter import convert_gphyt
from .families import FAMILIES
from .upstream import build_upstream_gphyt


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_backbone("gphyt", GPhyT)
    registry.register_converter("gphyt", convert_gphyt)
    registry.register_upstream("gphyt", backbone="gphyt", build=build_upstream_gphyt)


@opzoo.hookimpl
def opzoo_register_models(registry):
    for family in FAMILIES:
        registry.register_family(family)

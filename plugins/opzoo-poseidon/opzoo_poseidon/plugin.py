"""Entry point of the opzoo-poseidon plugin: its registrations through opzoo's public hooks."""

import opzoo

from .backbone import Poseidon
from .converter import convert_poseidon
from .families import FAMILIES
from .upstream import build_upstream_poseidon


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_backbone("poseidon", Poseidon)
    registry.register_converter("poseidon", convert_poseidon)
    registry.register_upstream("poseidon", backbone="poseidon", build=build_upstream_poseidon)


@opzoo.hookimpl
def opzoo_register_models(registry):
    for family in FAMILIES:
        registry.register_family(family)

"""Entry point of the opzoo-moe plugin: its registrations through opzoo's public hooks."""

import opzoo

from .feedforward import SparseMoEFeedForward
from .nestor import NestorBlock
from .presets import register_presets


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_feedforward("moe", SparseMoEFeedForward)
    registry.register_block("nestor", NestorBlock)


@opzoo.hookimpl
def opzoo_register_models(registry):
    register_presets(registry)

"""Entry point of the opzoo-aot plugin: its registrations through opzoo's public hooks."""

import opzoo

from . import demo
from .presets import register_presets
from .residual import AOTResidual


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_residual("aot", AOTResidual)


@opzoo.hookimpl
def opzoo_register_models(registry):
    register_presets(registry)


@opzoo.hookimpl
def opzoo_register_commands(subparsers):
    demo.add_command(subparsers)

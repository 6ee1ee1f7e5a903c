"""Entry point of the opzoo-mup plugin: each method registers its own components and commands."""

import opzoo

from . import flerm


@opzoo.hookimpl
def opzoo_register_components(registry):
    flerm.register_components(registry)


@opzoo.hookimpl
def opzoo_register_commands(subparsers):
    flerm.add_commands(subparsers)

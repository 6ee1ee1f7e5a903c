"""Entry point of the opzoo-mup plugin: each method registers its own components and commands."""

import opzoo

from . import cli_mutransfer, flerm, mup_fno


@opzoo.hookimpl
def opzoo_register_components(registry):
    mup_fno.register_components(registry)
    flerm.register_components(registry)


@opzoo.hookimpl
def opzoo_register_commands(subparsers):
    cli_mutransfer.add_commands(subparsers)
    flerm.add_commands(subparsers)

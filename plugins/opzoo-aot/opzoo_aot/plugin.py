"""Entry point of the opzoo-aot plugin: its registrations through opzoo's public hooks."""

import opzoo

"""Entry point of the opzoo-mup plugin: its registrations through opzoo's public hooks."""

import opzoo

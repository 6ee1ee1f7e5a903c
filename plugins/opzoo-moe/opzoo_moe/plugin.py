"""Entry point of the opzoo-moe plugin: its registrations through opzoo's public hooks."""

import opzoo

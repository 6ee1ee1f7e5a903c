"""Entry point of the opzoo-fourier plugin: its registrations through opzoo's public hooks."""

import opzoo

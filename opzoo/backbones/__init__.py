"""Backbones shipped by the core."""

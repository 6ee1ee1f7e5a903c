"""A third-party opzoo plugin, written only against opzoo's public API."""

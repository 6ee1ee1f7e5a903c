"""The plugin host: the registry of components and presets, the pluggy host that fills it, the core's own
registrations, and the provenance rows and load checks presets carry."""

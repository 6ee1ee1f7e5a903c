"""The plugin host: the pluggy host that loads every plugin's hooks into the registry (:mod:`opzoo.registry`), and
the core's own registrations. It sits at the top of the layers: it loads everything."""

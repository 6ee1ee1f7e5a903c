"""The registry of components and presets (``registry``), checkpoint families declared as one table (``family``),
and the provenance rows and load checks presets carry (``provenance``). It sits low in the layers and imports no
torch: a backbone looks its components up here, and the plugin host (:mod:`opzoo.host`) fills it."""

"""The backbones shipped by the core: the POT backbone (``pot``: POT = "PDE operator transformer"),
its block layouts (``blocks``) and size table (``pot_sizes``), and a minimal ``simple`` operator.
Plugins add more backbones (FNO in opzoo-fourier) and block layouts (NESTOR's in opzoo-moe)."""

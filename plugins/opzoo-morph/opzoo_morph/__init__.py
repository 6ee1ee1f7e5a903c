"""opzoo-morph: MORPH (Rautela et al. 2025, lanl/MORPH) in opzoo: its network as the ``morph`` backbone (physical
fields in and out, 1-D to 3-D with the same weights), presets ``morph-ti/s/m/l`` for the four foundation checkpoints
and the ``morph`` converter."""

from .backbone import Morph, MorphConfig
from .converter import convert_morph
from .network import MorphNet

__all__ = ["Morph", "MorphConfig", "MorphNet", "convert_morph"]

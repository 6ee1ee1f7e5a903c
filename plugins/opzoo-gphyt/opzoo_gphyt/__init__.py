"""opzoo-gphyt: the General Physics Transformer (GPhyT, FloWsnr/General-Physics-Transformer) in opzoo: its network as
the ``gphyt`` backbone (physical fields in and out, Euler/Heun/RK4 steps of its time derivative), presets
``gphyt-s/m/l/xl`` for the four published checkpoints and the ``gphyt`` converter."""

from .backbone import GPhyT, GPhyTConfig
from .converter import convert_gphyt
from .network import GPhyTNet

__all__ = ["GPhyT", "GPhyTConfig", "GPhyTNet", "convert_gphyt"]

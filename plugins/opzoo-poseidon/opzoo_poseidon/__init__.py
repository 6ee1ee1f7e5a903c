"""opzoo-poseidon: Poseidon (Herde et al. 2024, camlab-ethz/poseidon) in opzoo: its network scOT as the ``poseidon``
backbone (physical fields in and out, a lead-time argument), presets ``poseidon-t/b/l`` for the three published
checkpoints and the ``poseidon`` converter. The weights are CC-BY-NC-4.0: non-commercial use only."""

from .backbone import Poseidon, PoseidonConfig
from .converter import convert_poseidon
from .network import ScOTNet

__all__ = ["Poseidon", "PoseidonConfig", "ScOTNet", "convert_poseidon"]

"""Entry point of the opzoo-fourier plugin: its registrations through opzoo's public hooks."""

import opzoo

from .dpot_converter import convert_dpot
from .fno import FNO
from .fourier_attention import FourierAttention
from .presets import FNO_CONTRACT, register_presets
from .upstream import build_neuralop_fno, build_official_dpot


@opzoo.hookimpl
def opzoo_register_components(registry):
    registry.register_mixer("fourier-attention", FourierAttention)
    registry.register_backbone("fno", FNO, contract=FNO_CONTRACT)
    registry.register_converter("dpot", convert_dpot)
    registry.register_upstream("neuraloperator:fno", backbone="fno", build=build_neuralop_fno)
    registry.register_upstream("official-dpot", backbone="pot", build=build_official_dpot)


@opzoo.hookimpl
def opzoo_register_models(registry):
    register_presets(registry)

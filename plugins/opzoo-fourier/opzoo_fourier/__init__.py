"""opzoo-fourier: DPOT's Fourier attention, FNO's spectral convolution, dpot-*/fno-* presets and
the official-DPOT checkpoint converter, registered through opzoo's public plugin hooks."""

from .dpot_converter import convert_dpot, official_to_opzoo_name
from .fno import FNO, FnoConfig
from .fourier_attention import FourierAttention
from .presets import DPOT, dpot_micro_preset_args, dpot_preset_args
from .spectral_conv import SpectralConv

__all__ = ["FourierAttention", "SpectralConv", "FNO", "FnoConfig", "convert_dpot",
           "official_to_opzoo_name", "dpot_preset_args", "dpot_micro_preset_args", "DPOT"]

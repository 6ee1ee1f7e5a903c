"""opzoo-mup: μP for spectral weights (``mup-fno`` hook, ``opzoo mutransfer``) and FLeRM."""

from .mup_fno import MuPFNO, mup_factor

__all__ = ["MuPFNO", "mup_factor"]

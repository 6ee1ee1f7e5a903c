"""The micro setup (docs/micro.md): the shared recipe of opzoo's own ``*-micro`` presets (``dpot-micro``,
``aot-pot-micro``, ``poseidon-micro``, ``gphyt-micro``, ``morph-micro``, ``pdet-mc-micro``), so that a plugin's
``*-micro`` preset pretrained the same way compares with them directly.

- ``MICRO_SUITE``: the synthetic PDE suite they were pretrained on (``configs/micro/``);
- ``POT_MICRO_SIZE`` and ``pot_micro_preset_args(**overrides)``: the POT at micro dims (32x32, 2 channels, D128);
- ``micro_pretrained_cfg()``: their training record; ``micro_results(eval_json)``: their card's numbers;
- ``micro_preset(...)``, ``micro_contract(...)``, ``suite_statistics(...)``: another family's ``*-micro`` preset
  (scOT, GPhyT, MORPH, PDE-Transformer), its data contract and its normalization over the suite.

These names were top-level (``opzoo.MICRO_SUITE``, ...) before issue 57; those still work for a release, with a
DeprecationWarning. Imported on first use (no torch at ``import opzoo.micro``).
"""

from ._lazy import lazy_exports

_LAZY = dict.fromkeys(["MICRO_SUITE", "POT_MICRO_SIZE", "micro_pretrained_cfg", "micro_results",
                       "pot_micro_preset_args"], "opzoo.models.pot_sizes")
_LAZY.update(dict.fromkeys(["micro_preset", "micro_contract", "suite_statistics"], "opzoo.models.micro_presets"))

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = list(_LAZY)

"""The POT size table (Ti/S/M/L/H) and the configs of presets on the POT backbone (docs/models.md §2).

Every plugin's POT preset (dpot-*, aot-pot-*, nestor-*, ...) takes its dims from :data:`POT_SIZES`
through :func:`pot_preset_args`, so one table says what "S" means for all of them. The token mixer is the
caller's: ``pot_preset_args(size, mixer=..., mixer_args=...)``; a mixer's plugin says how a size sets its
arguments (opzoo-fourier's ``dpot_preset_args`` gives DPOT's Fourier attention with ``n_blocks = heads``).
"""

from __future__ import annotations

import copy
import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import ConfigError
from .pot import PotConfig


@dataclasses.dataclass(frozen=True)
class PotSize:
    """One size of the POT backbone: latent ``width`` D, ``depth`` blocks, the token mixer's ``heads`` (for DPOT's
    Fourier attention its ``n_blocks``), the feed-forward's ``mlp_ratio`` and the output head's ``out_layer_dim``."""

    width: int
    depth: int
    heads: int
    mlp_ratio: float
    out_layer_dim: int


# DPOT's model sizes (docs/models.md §2's table, from the official DPOT configs), read-only
POT_SIZES: Mapping[str, PotSize] = MappingProxyType({
    "Ti": PotSize(width=512, depth=4, heads=4, mlp_ratio=1.0, out_layer_dim=32),
    "S": PotSize(width=1024, depth=6, heads=8, mlp_ratio=1.0, out_layer_dim=32),
    "M": PotSize(width=1024, depth=12, heads=8, mlp_ratio=4.0, out_layer_dim=32),
    "L": PotSize(width=1536, depth=24, heads=16, mlp_ratio=4.0, out_layer_dim=128),
    "H": PotSize(width=2048, depth=27, heads=8, mlp_ratio=4.0, out_layer_dim=128),
})

# DPOT's pretraining setup, shared by every preset on the POT backbone (docs/models.md §2): 128x128 inputs
# of 4 channels and 10 steps, patch 8, 12 dataset classes
_DPOT_SETUP: dict[str, Any] = dict(
    in_channels=4, out_channels=4, in_timesteps=10, out_timesteps=1,
    spatial_dims=2, img_size=[128, 128], patch_size=8, n_cls=12,
    act="gelu", time_agg="exp_mlp", normalize=False, block="dpot", residual="plain", residual_args={},
)

# what a call without mixer= got before the mixer became the caller's (opzoo-fourier's Fourier attention with
# n_blocks = heads and DPOT's 32 modes); kept for one release behind a DeprecationWarning
_LEGACY_MIXER, _LEGACY_MODES = "fourier-attention", 32


def pot_size(size: str | PotSize) -> PotSize:
    """A row of :data:`POT_SIZES` by name (``"Ti"``, ``"s"``, ... any case), or ``size`` itself."""
    if isinstance(size, PotSize):
        return size
    rows = {k.lower(): v for k, v in POT_SIZES.items()}
    if not isinstance(size, str) or size.lower() not in rows:
        raise ConfigError(f"POT size {size!r} is not one of {', '.join(POT_SIZES)} (or give a PotSize)")
    return rows[size.lower()]


def pot_preset_args(size: str | PotSize, *legacy: Any, **overrides: Any) -> dict[str, Any]:
    """The config of a POT preset: ``size`` (a :data:`POT_SIZES` name or a :class:`PotSize`) in DPOT's
    pretraining setup; ``overrides`` replace fields and name the token mixer, e.g.
    ``mixer="pointwise-mlp", mixer_args={}, block="sandwich", residual="aot"``.

    Without ``mixer=``, the config is DPOT's network (opzoo-fourier's ``fourier-attention``, ``n_blocks = heads``,
    32 modes) with a DeprecationWarning: name the mixer, or call ``opzoo_fourier.dpot_preset_args``. The form of
    opzoo 0.1's first README, ``pot_preset_args(width, depth, n_blocks, mlp_ratio, out_layer_dim, **overrides)``,
    still works for one release too, with a DeprecationWarning (CHANGELOG.md).
    """
    import warnings

    if legacy or isinstance(size, int):
        dims = (size, *legacy)
        if len(dims) != 5:
            raise ConfigError(f"pot_preset_args: the old form takes (width, depth, n_blocks, mlp_ratio, out_layer_dim), "
                              f"got {len(dims)} positional values; the current form is pot_preset_args('S', **overrides)")
        warnings.warn("pot_preset_args(width, depth, n_blocks, mlp_ratio, out_layer_dim, ...) is deprecated and will be "
                      "removed in the next release: use pot_preset_args(PotSize(width=..., depth=..., heads=..., "
                      "mlp_ratio=..., out_layer_dim=...), ...) or a size name such as 'S'", DeprecationWarning,
                      stacklevel=2)
        width, depth, heads, mlp_ratio, out_layer_dim = dims
        size = PotSize(width=width, depth=depth, heads=heads, mlp_ratio=mlp_ratio, out_layer_dim=out_layer_dim)
    row = pot_size(size)
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(PotConfig)})
    if unknown:
        raise ConfigError(f"pot_preset_args: unknown POT config field(s) {', '.join(map(repr, unknown))}")
    args = copy.deepcopy(_DPOT_SETUP)  # callers may edit the lists and dicts they get
    args.update(width=row.width, depth=row.depth, mlp_ratio=row.mlp_ratio, out_layer_dim=row.out_layer_dim)
    if "mixer" not in overrides:
        warnings.warn(f"pot_preset_args without mixer= gives {_LEGACY_MIXER!r} (opzoo-fourier's mixer) and is deprecated: "
                      "name the mixer (mixer=..., mixer_args=...), or use opzoo_fourier.dpot_preset_args for DPOT's "
                      "network; removed in the next release", DeprecationWarning, stacklevel=2)
        args.update(mixer=_LEGACY_MIXER, mixer_args={"n_blocks": row.heads, "modes": _LEGACY_MODES})
    args.update(overrides)
    return args


# The micro pretraining setup (configs/micro/, docs/micro.md) of every plugin's *-micro preset, so
# that their weights come from the same data, budget and seed and compare directly: D128, depth 4,
# 4 heads, on 32x32 inputs of 2 channels, patch 4, normalized per sample (the mixer is the caller's:
# opzoo-fourier's dpot_micro_preset_args gives DPOT's, with 8 modes)
POT_MICRO_SIZE = PotSize(width=128, depth=4, heads=4, mlp_ratio=1.0, out_layer_dim=32)
_MICRO_SETUP: dict[str, Any] = dict(in_channels=2, out_channels=2, in_timesteps=10, img_size=[32, 32], patch_size=4,
                                    normalize=True)
_MICRO_PRETRAINED_CFG: dict[str, Any] = dict(
    channels=2, resolution=[32, 32], in_timesteps=10, datasets=["ns-nu1e-3", "ns-nu1e-4", "diffusion-reaction", "swe"],
    normalization="inside the model (normalize=True: each sample's channels standardized over space and time, the "
                  "output de-standardized); raw generated fields, 1-field datasets padded with 1.0 and masked",
    # the max lr `opzoo demo` fine-tunes the micro models with; 1e-4 was ~10x too low (issue 27: 0.308
    # vs 0.209 test l2 full after 500 steps on an unseen Brusselator set)
    finetune_lr=1e-3,
    finetune_lr_source="opzoo demo's fine-tuning recipe for the micro presets (docs/micro.md)",
    license="MIT (opzoo's own weights, pretrained by opzoo on its synthetic suite: configs/micro/)",
)


# the pretraining mixture of the micro presets: generator args (configs/micro/*.yaml use them with seed 0;
# `opzoo demo`'s held-out trajectories use new seeds)
MICRO_SUITE: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "ns-nu1e-3": MappingProxyType({"kind": "ns", "res": 32, "nu": 1.0e-3, "steps": 20, "record_dt": 0.5}),
    "ns-nu1e-4": MappingProxyType({"kind": "ns", "res": 32, "nu": 1.0e-4, "steps": 20, "record_dt": 0.5}),
    "diffusion-reaction": MappingProxyType({"kind": "diffusion-reaction", "res": 32, "steps": 20, "t_end": 2.0}),
    "swe": MappingProxyType({"kind": "swe", "res": 32, "steps": 20, "t_end": 1.0}),
})


def pot_micro_preset_args(**overrides: Any) -> dict[str, Any]:
    """The config of a micro preset on the POT backbone (the shared micro setup above); ``overrides``
    replace fields as in :func:`pot_preset_args` and name the mixer, e.g. ``mixer=..., block="sandwich"``.
    Without ``mixer=``: DPOT's Fourier attention with 8 modes, deprecated as in :func:`pot_preset_args`."""
    import warnings

    setup = copy.deepcopy(_MICRO_SETUP)
    if "mixer" not in overrides:
        warnings.warn(f"pot_micro_preset_args without mixer= gives {_LEGACY_MIXER!r} (opzoo-fourier's mixer) and is "
                      "deprecated: name the mixer, or use opzoo_fourier.dpot_micro_preset_args; removed in the next "
                      "release", DeprecationWarning, stacklevel=2)
        setup.update(mixer=_LEGACY_MIXER, mixer_args={"n_blocks": POT_MICRO_SIZE.heads, "modes": 8})
    return pot_preset_args(POT_MICRO_SIZE, **{**setup, **overrides})


def micro_results(eval_json) -> list:
    """opzoo's measured l2 full of a micro preset on the held-out split of each pretraining dataset (its shipped
    ``eval.json``), for the card's model-index."""
    import json

    from ..registry.provenance import Result

    return Result.from_eval(json.loads(eval_json.read_text()), split="test: the last 10 % of each micro-suite file")


def micro_pretrained_cfg() -> dict[str, Any]:
    """The ``pretrained_cfg`` of a micro preset: the data its weights were pretrained on."""
    return copy.deepcopy(_MICRO_PRETRAINED_CFG)


__all__ = ["PotSize", "POT_SIZES", "POT_MICRO_SIZE", "MICRO_SUITE", "micro_results", "pot_size", "pot_preset_args", "pot_micro_preset_args", "micro_pretrained_cfg"]

"""The dpot-* and fno-* presets (docs/models.md §2, §5)."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo.micro import POT_MICRO_SIZE, micro_pretrained_cfg, micro_results, pot_micro_preset_args

from .dpot_converter import OFFICIAL_FILES
from .provenance import HEADS_CHECK, dpot_facts

CARDS = files("opzoo_fourier") / "model_cards"
DPOT_REPO = "hzk17/DPOT"

# preset: its row of the POT size table (opzoo.POT_SIZES)
DPOT_SIZES = {"dpot-ti": "Ti", "dpot-s": "S", "dpot-m": "M", "dpot-l": "L", "dpot-h": "H"}
FNO_MODES = {1: 16, 2: 12, 3: 8}  # the reference scripts' defaults (fourier_1d/2d/3d.py)

# dpot-micro: DPOT's network at micro dims (dpot_micro_preset_args), pretrained by opzoo on its
# synthetic suite (configs/micro/dpot-micro.yaml); the weights ship in this package (pretrained/dpot-micro/)


# DPOT's paper gives one lr for every size and stage and no other for fine-tuning
DPOT_LR_SOURCE = ("DPOT (Hao et al. 2024), sec. 4 and app. A: AdamW with lr 1e-3 and a one-cycle schedule for "
                  "models of all scales; fine-tuning reuses the recipe")


DPOT_MODES, DPOT_MICRO_MODES = 32, 8  # DPOT's Fourier modes; the micro setup's (docs/micro.md)

FNO_CONTRACT = opzoo.DataContract(
    name="fno",
    normalization=opzoo.Normalization("none", "the model takes the fields as given (the reference scripts normalize "
                                              "in their data loaders, outside the network)"),
    other_fields="adapt",
    other_fields_source="its lifting and projection read and write the channels: adapted to the file's when "
                        "fine-tuning (new channels initialized)",
    grid="any grid (Fourier layers keep the lowest modes); a grid smaller than twice the modes is refused",
    resample="bilinear",
    boundary="periodic: its Fourier layers assume a periodic domain (no padding, as the reference scripts)",
    spatial_dims=(1, 2, 3),
)


def dpot_preset_args(size: str | opzoo.PotSize, **overrides) -> dict:
    """DPOT's network at POT size ``size`` (a :data:`opzoo.POT_SIZES` name or a PotSize) in DPOT's setup: the
    ``fourier-attention`` mixer with ``n_blocks = heads`` and 32 modes; ``overrides`` as in
    :func:`opzoo.pot_preset_args` (e.g. ``block="sandwich", residual="aot"`` for AOT-POT)."""
    mixer = {"mixer": "fourier-attention", "mixer_args": {"n_blocks": opzoo.pot_size(size).heads, "modes": DPOT_MODES}}
    return opzoo.pot_preset_args(size, **{**mixer, **overrides})


def dpot_micro_preset_args(**overrides) -> dict:
    """DPOT's network in the shared micro setup (:func:`opzoo.micro.pot_micro_preset_args`), 8 Fourier modes."""
    mixer = {"mixer": "fourier-attention",
             "mixer_args": {"n_blocks": POT_MICRO_SIZE.heads, "modes": DPOT_MICRO_MODES}}
    return pot_micro_preset_args(**{**mixer, **overrides})


def dpot_args(name: str) -> dict:
    """The POT config of DPOT preset ``name``: DPOT's network at its dims."""
    return dpot_preset_args(DPOT_SIZES[name])


def register_presets(registry) -> None:
    for name in DPOT_SIZES:
        registry.register_model(
            name,
            backbone="pot",
            args=dpot_args(name),
            pretrained=opzoo.PretrainedSource(DPOT_REPO, OFFICIAL_FILES[name], converter="dpot",
                                              checks=(HEADS_CHECK,) if name == "dpot-l" else ()),
            card=CARDS / f"{name}.md",
            pretrained_cfg=dict(channels=4, resolution=[128, 128], in_timesteps=10,
                                normalization="none (inputs as in DPOT's preprocessed mixture)",
                                finetune_lr=1e-3, finetune_lr_source=DPOT_LR_SOURCE),
            aliases=("dpot-t",) if name == "dpot-ti" else (),
            provenance=dpot_facts(name, DPOT_REPO, OFFICIAL_FILES[name]),
        )
    registry.register_model(
        "dpot-micro",
        backbone="pot",
        args=dpot_micro_preset_args(),
        pretrained=opzoo.PretrainedSource.package("opzoo_fourier", "pretrained/dpot-micro"),
        card=CARDS / "dpot-micro.md",
        pretrained_cfg=micro_pretrained_cfg(),
        results=micro_results(files("opzoo_fourier") / "pretrained" / "dpot-micro" / "eval.json"),
    )
    for d, modes in FNO_MODES.items():
        registry.register_model(
            f"fno-{d}d",
            backbone="fno",
            args=dict(spatial_dims=d, width=64, depth=4, modes=modes, act="gelu",
                      in_channels=1, out_channels=1, in_timesteps=1, out_timesteps=1),
            card=CARDS / f"fno-{d}d.md",
            pretrained_cfg=dict(channels=1, in_timesteps=1),
        )

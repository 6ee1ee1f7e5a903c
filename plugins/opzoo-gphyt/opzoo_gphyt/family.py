"""The General Physics Transformer's four checkpoints as one table: each row is a preset, and its weights source,
load check, provenance, ``pretrained_cfg`` and card are derived from it by the rules in ``provenance.py`` and
the load check :func:`opzoo.kit.file_args_agree`; the plugin's entry point is :data:`PLUGIN`.

Rows: FloWsnr/General-Physics-Transformer ``gphyt/model/model_specs.py`` @ 4374116 (the sizes) and the Hub repo
``flwi/Physics-Foundation-Model`` its README links (file names and sizes as the issue gives them; unverified here)."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo import kit
from opzoo.micro import micro_contract, micro_preset, suite_statistics

from .backbone import GPhyT
from .converter import SIZES, build_upstream_gphyt, convert_gphyt, file_args
from .network import parameter_count
from .provenance import CONTRACT, HUB_REPO, card_fields, facts, pretrained_cfg

CARDS = files("opzoo_gphyt") / "model_cards"
SHARED = {"in_channels": 5, "out_channels": 5, "in_timesteps": 4, "img_size": [256, 128], "patch_size": [1, 16, 16],
          "use_derivatives": True, "integrator": "Euler"}


def row(name: str, size: str, file: str, megabytes: int) -> opzoo.Variant:
    args = dict(SIZES[f"GPT_{size}"])
    params = parameter_count(fields=5, dim=args["hidden_dim"], mlp_dim=args["mlp_dim"], layers=args["num_layers"],
                             patch=(1, 16, 16), tokens=(4, 16, 8), use_derivatives=True)
    return opzoo.Variant(name, args=args, weights=file, converter_options={"num_heads": args["num_heads"]},
                         data={"size": size, "file": file, "megabytes": megabytes, "params": params})


GPHYT = opzoo.CheckpointFamily(
    "gphyt", backbone="gphyt", args=SHARED, repo_id=HUB_REPO, converter="gphyt",
    variants=(
        #   preset     size  file           MB (the Hub's)
        row("gphyt-s", "S", "gphyt-S.pth", 32),
        row("gphyt-m", "M", "gphyt-M.pth", 446),
        row("gphyt-l", "L", "gphyt-L.pth", 1500),
        row("gphyt-xl", "XL", "gphyt-XL.pth", 3200),
    ),
    checks=(kit.file_args_agree("GPhyT", file_args, shown=("hidden_dim", "num_heads", "num_layers", "use_derivatives",
                                                            "integrator", "in_timesteps", "img_size",
                                                            "normalization")),),
    provenance=facts, pretrained_cfg=lambda v: pretrained_cfg(v.name),
    card=CARDS / "gphyt.md", card_fields=card_fields, contract=CONTRACT,
)

# opzoo's own GPhyT at micro dims, pretrained on the micro suite (configs/micro/gphyt-micro.yaml, docs/micro.md)
MICRO = micro_preset(
    "gphyt-micro", backbone="gphyt", package="opzoo_gphyt", in_timesteps=4,
    args={"hidden_dim": 96, "mlp_dim": 384, "num_heads": 3, "num_layers": 4, "img_size": (32, 32),
          "patch_size": (1, 4, 4)},
    contract=micro_contract(CONTRACT, grid="32x32 (its position table); another grid is resampled to it, or the "
                                           "table interpolated when fine-tuning at --resolution H W",
                            normalization=suite_statistics(("field_mean", "field_std"), CONTRACT.normalization.by_config,
                                                           CONTRACT.normalization.alternatives)))

PLUGIN = kit.FamilyPlugin(GPHYT, backbones={"gphyt": GPhyT}, converters={"gphyt": convert_gphyt},
                          upstreams={"gphyt": ("gphyt", build_upstream_gphyt)}, models=(MICRO,))

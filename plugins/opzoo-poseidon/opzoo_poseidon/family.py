"""Poseidon's three pretrained checkpoints as one table: each row is a preset, and its weights source, load check,
provenance, ``pretrained_cfg`` and card are derived from it by the rules in ``provenance.py``, and the load check :func:`opzoo.kit.file_args_agree`; the
plugin's entry point is :data:`PLUGIN`.

Rows: camlab-ethz/poseidon ``scOT/train.py`` ``MODEL_MAP`` @ v1-paper (the sizes; its "S" size was not published)
and the Hub repos ``camlab-ethz/Poseidon-T/B/L`` its README names."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo import kit
from opzoo.micro import micro_contract, micro_preset, suite_statistics

from .backbone import Poseidon
from .converter import build_upstream_poseidon, convert_poseidon, file_args
from .network import parameter_count
from .provenance import CONTRACT, FIELD_MEAN, FIELD_STD, LEAD_TIME, card_fields, facts, hub_repo, pretrained_cfg

CARDS = files("opzoo_poseidon") / "model_cards"
SHARED = {"in_channels": 4, "out_channels": 4, "image_size": 128, "patch_size": 4, "num_heads": (3, 6, 12, 24),
          "skip_connections": (2, 2, 2, 0), "window_size": 16, "mlp_ratio": 4.0, "lead_time": LEAD_TIME,
          "field_mean": FIELD_MEAN, "field_std": FIELD_STD}


def row(name: str, size: str, embed_dim: int, depth: int) -> opzoo.Variant:
    args = {"embed_dim": embed_dim, "depths": (depth,) * 4}
    params = parameter_count(4, 4, embed_dim, args["depths"], SHARED["num_heads"], SHARED["skip_connections"])
    return opzoo.Variant(name, args=args, repo_id=hub_repo(size), weights="model.safetensors",
                         extra_files=("config.json",), data={"size": size, "params": params,
                                                             "args": {**SHARED, **args}})


POSEIDON = opzoo.CheckpointFamily(
    "poseidon", backbone="poseidon", args=SHARED, converter="poseidon",
    fallback_filenames=("pytorch_model.bin",),  # the repos' first uploads; read with weights_only
    variants=(
        #   preset       size embed depth (MODEL_MAP)
        row("poseidon-t", "T", 48, 4),
        row("poseidon-b", "B", 96, 8),
        row("poseidon-l", "L", 192, 8),
    ),
    checks=(kit.file_args_agree("Poseidon (scOT)", file_args, shown=("embed_dim", "depths", "in_channels",
                                                                       "out_channels", "image_size")),),
    provenance=facts, pretrained_cfg=lambda v: pretrained_cfg(v.name),
    card=CARDS / "poseidon.md", card_fields=card_fields, contract=CONTRACT,
)

# opzoo's own scOT at micro dims, pretrained on the micro suite (configs/micro/poseidon-micro.yaml, docs/micro.md);
# three levels, since 32x32 with 2x2 patches leaves a 2x2 token grid after three merges
MICRO = micro_preset(
    "poseidon-micro", backbone="poseidon", package="opzoo_poseidon", in_timesteps=1,
    args={"image_size": 32, "patch_size": 2, "embed_dim": 24, "depths": (2, 2, 2), "num_heads": (2, 4, 8),
          "skip_connections": (2, 2, 0), "window_size": 4, "mlp_ratio": 4.0, "lead_time": LEAD_TIME},
    contract=micro_contract(CONTRACT, grid="32x32; any square grid with an even side (Fourier-resampled to 32x32 "
                                           "inside and back, as scOT's forward); another grid is resampled first",
                            normalization=suite_statistics(("field_mean", "field_std"))))

PLUGIN = kit.FamilyPlugin(POSEIDON, backbones={"poseidon": Poseidon}, converters={"poseidon": convert_poseidon},
                          upstreams={"poseidon": ("poseidon", build_upstream_poseidon)}, models=(MICRO,))

"""The dpot-* and fno-* presets (docs/models.md §2, §5)."""

from __future__ import annotations

from importlib.resources import files

import opzoo
from opzoo.micro import POT_MICRO_SIZE, micro_pretrained_cfg, micro_results, pot_micro_preset_args

from .dpot_converter import OFFICIAL_FILES, file_args
from .provenance import HEADS_CHECK, dpot_facts

CARDS = files("opzoo_fourier") / "model_cards"
DPOT_REPO = "hzk17/DPOT"

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


RESULTS_HEADER = ("| model | FNO ν=1e-5 | FNO ν=1e-4 | FNO ν=1e-3 | PDEBench CNS (1,0.1) | CNS (1,0.01) | CNS M1 | "
                  "CNS (0.1,0.1) | CNS (0.1,0.01) | CNS M0.1 | PDEBench DR | PDEBench SWE | PDEArena NS | "
                  "PDEArena NS-cond | CFDBench |\n" + "|---" * 15 + "|")
L_HEAD_NOTE = """
**Head count (recorded ambiguity).** DPOT's README gives Large 16 heads; its `configs/pretrain_large.yaml`
(dcd2f9a) says `n_blocks: [8]  ### 8????`. opzoo uses 16: the README's 509M parameters match 16 heads
(509,018,739) and not 8 (523,174,515). The head count fixes the Fourier-attention tensor shapes, so the load
checks it on the real weights (`opzoo verify dpot-l`) and refuses with the count it finds if the file has 8.
"""


def dpot_row(name: str, size: str, word: str, official: str, zero_shot: str, tuned: str | None,
             aliases: tuple[str, ...] = ()) -> opzoo.Variant:
    """One published DPOT checkpoint: its POT size, the paper's name and parameter count, and its Table 1 rows (the
    authors' relative L2 zero-shot and after 500 epochs of fine-tuning per subset)."""
    return opzoo.Variant(name, args=dpot_preset_args(size), weights=OFFICIAL_FILES[name], aliases=aliases,
                         data={"word": word, "official": official, "zero_shot": zero_shot, "tuned": tuned,
                               "params": int(official.replace(",", ""))})


def dpot_card_fields(v: opzoo.Variant) -> dict:
    a = v.args
    tuned = ("" if v["tuned"] is None else "\n\nAfter fine-tuning on each subset for 500 epochs (Table 1, third part):"
             "\n\n" + RESULTS_HEADER + "\n" + v["tuned"])
    return {"size_word": v["word"], "file": v.weights, "width": a["width"], "blocks": a["depth"],
            "heads": a["mixer_args"]["n_blocks"], "mlp_ratio": f"{a['mlp_ratio']:g}", "head_width": a["out_layer_dim"],
            "official_params": v["official"], "head_note": L_HEAD_NOTE if v.name == "dpot-l" else "",
            "zero_shot_row": v["zero_shot"], "finetuned_table": tuned}


DPOT_FILE_CHECK = opzoo.kit.file_args_agree("DPOT", file_args, shown=("width", "depth", "mlp_ratio", "out_layer_dim"))

# thu-ml/DPOT's five checkpoints (README @ dcd2f9a: sizes and parameter counts; the paper's Table 1: the rows)
DPOT = opzoo.CheckpointFamily(
    "dpot", backbone="pot", repo_id=DPOT_REPO, converter="dpot", args={},
    variants=(
        dpot_row("dpot-ti", "Ti", "Tiny", "7,534,643",
                 "| Ours-Ti (7M) | 0.0976 | 0.0606 | 0.00954 | 0.0173 | 0.0397 | 0.0285 | 0.0132 | 0.0220 | 0.0176 | "
                 "0.0321 | 0.00560 | 0.125 | 0.384 | 0.00952 |",
                 "| T-500 (7M, fine-tuned 500 epochs per subset) | 0.0520 | 0.0367 | 0.00580 | 0.0112 | 0.0195 | "
                 "0.0153 | 0.0174 | 0.0138 | 0.0156 | 0.0148 | 0.00241 | 0.0910 | 0.280 | 0.00391 |", aliases=("dpot-t",)),
        dpot_row("dpot-s", "S", "Small", "30,801,459",
                 "| Ours-S (30M) | 0.0553 | 0.0442 | 0.0131 | 0.0153 | 0.0337 | 0.0245 | 0.0118 | 0.0188 | 0.0153 | "
                 "0.0379 | 0.00657 | 0.0999 | 0.316 | 0.00696 |",
                 "| S-500 (30M) | 0.0322 | 0.0237 | 0.00437 | 0.0129 | 0.0167 | 0.0148 | 0.0152 | 0.0126 | 0.0139 | "
                 "0.0129 | 0.00235 | 0.0867 | 0.268 | 0.00382 |"),
        dpot_row("dpot-m", "M", "Medium", "122,125,875",
                 "| Ours-M (122M) | 0.0409 | 0.0285 | 0.00474 | 0.0116 | 0.0238 | 0.0177 | 0.00866 | 0.0129 | 0.0108 | "
                 "0.0292 | 0.00290 | 0.0812 | 0.276 | 0.00752 |",
                 "| M-500 (100M as printed in the paper) | 0.0229 | 0.0126 | 0.00335 | 0.00998 | 0.0146 | 0.0123 | "
                 "0.0161 | 0.00947 | 0.0128 | 0.0103 | 0.00227 | 0.0294 | 0.172 | 0.00373 |"),
        dpot_row("dpot-l", "L", "Large", "509,018,739",
                 "| Ours-L (500M) | 0.0550 | 0.0274 | 0.00528 | 0.0100 | 0.0216 | 0.0158 | 0.00872 | 0.0115 | 0.0101 | "
                 "0.0232 | 0.00233 | 0.0798 | 0.240 | 0.00650 |",
                 "| L-500 (500M) | 0.0213 | 0.0104 | 0.00323 | 0.0108 | 0.0131 | 0.0119 | 0.0160 | 0.00905 | 0.0125 | "
                 "0.00739 | 0.00170 | 0.0278 | 0.170 | 0.00322 |"),
        dpot_row("dpot-h", "H", "Huge", "1,031,082,099",
                 "| Ours-H (1.03B) | 0.0174 | 0.0131 | 0.00229 | 0.00961 | 0.0180 | 0.0138 | 0.00847 | 0.0105 | 0.00948 | "
                 "0.0191 | 0.00199 | 0.0379 | 0.213 | 0.00749 |", None),
    ),
    checks=lambda v: (DPOT_FILE_CHECK, *((HEADS_CHECK,) if v.name == "dpot-l" else ())),
    provenance=lambda v: dpot_facts(v.name, DPOT_REPO, v.weights),
    pretrained_cfg=dict(channels=4, resolution=[128, 128], in_timesteps=10,
                        normalization="none (inputs as in DPOT's preprocessed mixture)", finetune_lr=1e-3,
                        finetune_lr_source=DPOT_LR_SOURCE),
    card=CARDS / "dpot.md", card_fields=dpot_card_fields,
)


def fno_row(d: int) -> opzoo.Variant:
    return opzoo.Variant(f"fno-{d}d", args=dict(spatial_dims=d, modes=FNO_MODES[d]))


def fno_card_fields(v: opzoo.Variant) -> dict:
    d, modes = v.args["spatial_dims"], v.args["modes"]
    return {"dims": d, "modes": modes, "weights": 2 ** (d - 1), "weight_shape": ", ".join(["64", "64"] + [str(modes)] * d),
            "axes": ", ".join("XYZ"[:d])}


# the Fourier Neural Operator in 1-D, 2-D and 3-D at the reference scripts' sizes (no weights are published)
FNO_FAMILY = opzoo.CheckpointFamily(
    "fno", backbone="fno", args=dict(width=64, depth=4, act="gelu", in_channels=1, out_channels=1, in_timesteps=1,
                                     out_timesteps=1),
    variants=(fno_row(1), fno_row(2), fno_row(3)),
    pretrained_cfg=dict(channels=1, in_timesteps=1), card=CARDS / "fno.md", card_fields=fno_card_fields,
    contract=FNO_CONTRACT,
)


def register_presets(registry) -> None:
    registry.register_family(DPOT)
    registry.register_family(FNO_FAMILY)
    registry.register_model(
        "dpot-micro",
        backbone="pot",
        args=dpot_micro_preset_args(),
        pretrained=opzoo.PretrainedSource.package("opzoo_fourier", "pretrained/dpot-micro"),
        card=CARDS / "dpot-micro.md",
        pretrained_cfg=micro_pretrained_cfg(),
        results=micro_results(files("opzoo_fourier") / "pretrained" / "dpot-micro" / "eval.json"),
    )

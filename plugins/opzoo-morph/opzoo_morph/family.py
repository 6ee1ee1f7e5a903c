"""MORPH's foundation checkpoints as one table, where each fact about them comes from (lanl/MORPH at a commit,
fetched with its history), and the plugin's registration (its entry point is :data:`PLUGIN`).

Each row of the table is a preset; its weights source, load check, provenance, ``pretrained_cfg`` and card are
functions of the row (:class:`opzoo.Variant`): its ``size``, ``file``, ``epochs`` and ``max_ar``. Rows: lanl/MORPH
``scripts/finetune_MORPH_general.py`` @ a16d5c4 (the file of each size in ``models/FM``) and
``config/argument_parser.py`` @ a16d5c4 (``MORPH_MODELS``: the sizes; the L size's "~480M" note)."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import opzoo
from opzoo import kit
from opzoo.micro import micro_contract, micro_preset, suite_statistics

from .backbone import Morph
from .converter import ANY_FILE_CFG, HEAD, SIZES, at, build_upstream_morph, convert_morph, file_args
from .network import parameter_count

MODEL_CODE = "de85ae2"  # 2025-10-26: the network's last change (it returns (enc, z, pred)); the function is the first
#                         upload's (6d5a2e6, 2025-10-08)
HUB_REPO = "mahindrautela/MORPH"
HUB_SUBFOLDER = "models/FM"
LICENSE = "MIT (code, LICENSE since a16d5c4; BSD-3 before, and README still says BSD-3); weights: not stated"
CITATION = ("Rautela, Most, Mansingh, Love, Biswas, Oyen, Lawrence. MORPH: PDE Foundation Models with Arbitrary Data "
            "Modality. arXiv:2509.21670, 2025")
PRETRAINING = ["MHD3D (The Well)", "DR2D (PDEBench)", "CFD1D (PDEBench)", "SW2D (PDEBench)", "CFD2D-IC (PDEBench)",
               "CFD3D (PDEBench)"]


NETWORK = at("src/utils/vit_conv_xatt_axialatt2.py", MODEL_CODE)

CONTRACT = opzoo.DataContract(
    name="morph",
    fields=None,
    units="each trajectory's own, RevIN-normalized",
    other_fields="any",
    other_fields_source="no tensor depends on the channel count: up to 3 fields of up to 3 components "
                        "(field_components groups the channels)",
    grid="any grid whose axes are 1 or multiples of its patch 8 (the position table is resampled to the patches), "
         "up to 4096 patches; 1-D, 2-D or 3-D with the same weights",
    resample="bilinear",
    resample_source="to the nearest multiple of the patch (opzoo's)",
    boundary="no boundary input; its pretraining sets mix periodic and non-periodic domains",
    spatial_dims=(1, 2, 3),
    normalization=opzoo.Normalization(
        "per-sample",
        "RevIN: each sample's fields standardized over the input window ((x - mu) / sqrt(var + 1e-6)) inside the "
        "model, and the prediction brought back; upstream's is over each whole trajectory, before training",
        source=at("src/utils/normalization.py") + " (RevIN)",
        breaks="a field uniform over the input window (a field at rest) is refused: use normalization='stats'",
        config=("field_mean", "field_std"), by_config={"stats": "training-split", "none": "none"},
        alternatives={"training-split": "each channel z-scored by its statistics over the training split "
                                        "(normalization='stats'), inside the model",
                      "none": "the network sees the fields as given (normalization='none'): RevIN-normalize them as "
                              "upstream did"}),
)


def facts(variant: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    size, file, max_ar = variant["size"], variant["file"], variant["max_ar"]
    interpolated = variant.args.get("time_positions") == "interpolate"
    return (
        Fact("Hub repo", f"{HUB_REPO}, {HUB_SUBFOLDER}/{file}",
             at("scripts/finetune_MORPH_general.py") + " (hf_hub_download repo_id, subfolder, the file per size)"),
        Fact("Hub revision", "not pinned: the Hub repo's commits could not be read here, so a load takes main; the "
             "load check records the commit it read, and `opzoo verify` prints it", f"huggingface.co/{HUB_REPO} (not "
             "reachable offline)", verified=False,
             alternatives=("weights replaced on main since: the tensor check refuses another network",)),
        Fact("weights file", "torch.save of {epoch, model_state_dict, optimizer_state_dict, scheduler_state_dict}, "
             "tensor names with the 'module.' prefix where trained under DataParallel/DDP; upstream reads it with "
             "torch.load(weights_only=True) and so does opzoo (only model_state_dict is used)",
             at("scripts/pretrain_MORPH.py") + " (checkpoint dict); " + at("src/utils/trainers.py")
             + " (the _latestbatch save); " + at("scripts/infer_MORPH.py") + " (weights_only=True, 'module.' strip)"),
        Fact("architecture", f"MORPH-{size}: conv filters 8, width {variant.args['dim']}, {variant.args['depth']} "
             f"blocks of {variant.args['heads']} heads, MLP {variant.args['mlp_dim']}; cross-attention over fields "
             "with 32 heads; patch 8; at most 3 fields of 3 components; position table of "
             f"{max_ar} frame(s) x 4096 patches", at("config/argument_parser.py") + " (MORPH_MODELS, --heads_xa 32); "
             + at("scripts/pretrain_MORPH.py") + " (FM: patch 8, max_patches 4096, 3 fields, 3 components)"),
        Fact("time positions", ("interpolated bilinearly over frames and patches (the pretraining builds the L size "
                                "with model_size='L' and max_ar > 1 so); upstream's own fine-tuning script builds the "
                                "network without model_size, i.e. with the sliced table, another function")
             if interpolated else "the first T_in rows of the table, linearly interpolated over the patches",
             NETWORK + "; " + at("scripts/pretrain_MORPH.py") + " (model_size=args.model_size); "
             + at("scripts/finetune_MORPH_general.py") + " (no model_size)", verified=not interpolated,
             alternatives=("the sliced table (time_positions='slice'): the tensor has the same shape either way",)
             if interpolated else ()),
        Fact("max_ar in the file name", f"max_ar{max_ar}: the position table's frames, the longest input window the "
             f"network takes (T_in <= {max_ar}{', interpolated to any length' if interpolated else ''}); not a "
             "rollout length: each training sample is a window of ar_order frames and the one frame after it",
             at("config/argument_parser.py") + " (--max_ar_order, --ar_order); "
             + at("src/utils/data_preparation_fast.py") + " (inputs of ar_order frames, target the next)"),
        Fact("multi-frame windows in training", "upstream's window builder reshapes numpy's sliding_window_view "
             "(window axis last) as if the window axis came second, so a window of k > 1 frames reaches the network "
             "with frames and grid points interleaved; the targets are right. A checkpoint trained with ar_order > 1 "
             "(max_ar16) learned from such windows. opzoo feeds the frames in order; the presets take T_in = 1, "
             "where the two agree", at("src/utils/data_preparation_fast.py") + " (FastARDataPreparer.prepare); "
             + at("src/utils/datastreamers/datastreaming_cfd2d_1.py") + " (the pretraining streamers use it)",
             verified=max_ar == 1,
             alternatives=("for morph-l with T_in > 1: its weights may expect the interleaved windows",)
             if max_ar > 1 else ()),
        Fact("fields and components", "data in (N, T, F, C, D, H, W): 1-D on W, 2-D on (H, W); a scalar field is "
             "repeated over the components of the vector field beside it (CFD2D: velocity (2), density x2, pressure "
             "x2); opzoo's field_components groups the channels so, and reads a scalar back as the mean of its copies",
             at("src/utils/dataloaders/dataloader_cfd2d.py") + " (inflate_array, np.repeat); "
             + at("src/utils/uptf7.py") + " (at most 3 fields, 3 components, 128^3 points)"),
        Fact("normalization", "RevIN per trajectory and field over all its frames, components and points: "
             "(x - mu) / sqrt(var + 1e-6), applied to the data files before training (outputs are in normalized "
             "units); opzoo's normalization='revin' uses the input window's statistics instead, since a forecast "
             "cannot see the frames it predicts", at("src/utils/normalization.py") + " (RevIN.compute_stats, "
             "normalize; denormalize_testeval uses 1e-8); " + at("scripts/finetune_MORPH_general.py"),
             verified=False, alternatives=("the whole trajectory's statistics, as upstream's files: pass "
                                           "normalization='none' and normalize the data yourself",)),
        Fact("training data", ", ".join(PRETRAINING) + " (the six pretraining sets)",
             at("scripts/infer_MORPH.py") + " ('Pretuning sets')"),
        Fact("training", f"AdamW lr 1e-3 (default), ReduceLROnPlateau, dropout 0.1; this file: epoch "
             f"{variant['epochs']}" + (" (a mid-epoch '_latestbatch' save)" if "latestbatch" in file else ""),
             at("config/argument_parser.py") + " (--learning_rate); " + at("src/utils/trainers.py")),
        Fact("code that trained the weights", "not recorded: the network's function is unchanged from the first "
             f"upload (6d5a2e6, 2025-10-08) to {HEAD} (de85ae2 changed only what forward returns); the training "
             "environment was Python 3.8, torch 2.4.1", NETWORK + " (git log); " + at("README.md") + " (environment)",
             verified=False, alternatives=("an earlier private revision: the tensor check compares every name and "
                                           "shape with this network",)),
        Fact("published parameters", variant["published_params"], at("config/argument_parser.py") + " (comments)"
             if variant["published_params"] != "not stated" else "not stated upstream",
             verified=variant["published_params"] != "not stated"),
        Fact("code license", "MIT in LICENSE since a16d5c4 (2026-01-28, 'updated license from BSD3 to MIT'; BSD-3 "
             "before); README.md at the same commit still says BSD-3", at("LICENSE") + "; " + at("README.md"),
             verified=False, alternatives=("BSD-3-Clause, as README.md says",)),
        Fact("weights license", "not stated", f"the Hub card of {HUB_REPO} could not be read here", verified=False,
             alternatives=("a license on the Hub card: check it before redistributing",)),
    )


def pretrained_cfg(preset: str | None) -> dict[str, Any]:
    """The facts of a published checkpoint (``preset``), or of another MORPH file (None: its training is unknown)."""
    if preset is None:
        return dict(ANY_FILE_CFG)
    return {**ANY_FILE_CFG, "datasets": list(PRETRAINING),
            "normalization": "RevIN per trajectory and field, by upstream's data preparation (outputs normalized)",
            "license": "MIT (code); weights: not stated"}


def card_fields(variant: opzoo.Variant) -> dict[str, Any]:
    a = variant.args
    return {"size": variant["size"], "file": variant["file"], "max_ar": variant["max_ar"],
            "dim": a["dim"], "depth": a["depth"], "heads": a["heads"], "mlp_dim": a["mlp_dim"],
            "params": f"{variant['params'] / 1e6:.1f}M", "published_params": variant["published_params"],
            "epochs": variant["epochs"],
            "time_positions": {"slice": "sliced", "interpolate": "interpolated"}[a.get("time_positions", "slice")]}


CARDS = files("opzoo_morph") / "model_cards"
FM = {"patch_size": 8, "max_patches": 4096, "max_fields": 3, "max_components": 3, "heads_xa": 32}


def row(name: str, size: str, file: str, epochs: int, max_ar: int, published_params: str) -> opzoo.Variant:
    args = {**SIZES[size], "max_ar": max_ar, **({"time_positions": "interpolate"} if max_ar > 1 else {})}
    # what the tensors cannot tell goes to the converter from the row (upstream's table and pretraining script)
    told = {"heads": args["heads"], "heads_xa": FM["heads_xa"], "time_positions": args.get("time_positions", "slice")}
    return opzoo.Variant(name, args=args, weights=f"{HUB_SUBFOLDER}/{file}", converter_options=told,
                         data={"size": size, "file": file, "epochs": epochs, "max_ar": max_ar,
                               "published_params": published_params,
                               "params": parameter_count(**FM, **args)})


MORPH = opzoo.CheckpointFamily(
    "morph", backbone="morph", args=FM, repo_id=HUB_REPO, converter="morph",
    variants=(
        #   preset     size  file in models/FM                             epoch max_ar published
        row("morph-ti", "Ti", "morph-Ti-FM-max_ar1_ep225.pth", 225, 1, "not stated"),
        row("morph-s", "S", "morph-S-FM-max_ar1_ep225.pth", 225, 1, "not stated"),
        row("morph-m", "M", "morph-M-FM-max_ar1_ep290_latestbatch.pth", 290, 1, "not stated"),
        row("morph-l", "L", "morph-L-FM-max_ar16_ep189_latestbatch.pth", 189, 16, "~480M (with AR1:16)"),
    ),
    checks=(kit.file_args_agree("MORPH", file_args, shown=("dim", "heads", "depth", "mlp_dim", "max_ar", "max_patches")),),
    provenance=facts, pretrained_cfg=lambda v: pretrained_cfg(v.name),
    card=CARDS / "morph.md", card_fields=card_fields, contract=CONTRACT,
)

# opzoo's own MORPH at micro dims, pretrained on the micro suite (configs/micro/morph-micro.yaml, docs/micro.md);
# normalization='stats', since RevIN refuses the suite's padded channel (constant 1.0 over every window)
MICRO = micro_preset(
    "morph-micro", backbone="morph", package="opzoo_morph", in_timesteps=1,
    args={"dim": 64, "depth": 4, "heads": 4, "heads_xa": 4, "mlp_dim": 256, "conv_filters": 8, "patch_size": 4,
          "max_patches": 64, "max_ar": 1, "normalization": "stats"},
    contract=micro_contract(CONTRACT, grid="any grid whose axes are 1 or multiples of its patch 4 (the position "
                                           "table is resampled to the patches), up to 64 patches",
                            normalization=suite_statistics(
                                ("field_mean", "field_std"), {"revin": "per-sample", "none": "none"},
                                {**CONTRACT.normalization.alternatives, "per-sample": CONTRACT.normalization.words})))

PLUGIN = kit.FamilyPlugin(MORPH, backbones={"morph": Morph}, converters={"morph": convert_morph},
                          upstreams={"morph": ("morph", build_upstream_morph)}, models=(MICRO,))

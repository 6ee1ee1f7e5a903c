"""MPP's four pretrained AViTs as one table, where each fact about them comes from
(PolymathicAI/multiple_physics_pretraining, fetched with its history), its data contract, and the plugin's
registration (its entry point is :data:`PLUGIN`).

Rows: ``config/mpp_avit_{ti,s,b,L}_config.yaml`` @ e751fc2 (``basic_config``: embed_dim, num_heads, processor_blocks;
the four files differ in nothing else). The weights are not on the Hub: README.md @ e751fc2 links a Google Drive
folder with one file per size, which users download by hand (``checkpoint_path=FILE``)."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import opzoo
from opzoo import kit

from .backbone import STATE_NAMES, UNUSED_SLOTS, MppAViT
from .converter import ANY_FILE_CFG, HEAD, TRAINED, at, build_upstream_mpp, convert_mpp, file_args
from .network import parameter_count

DRIVE = "https://drive.google.com/drive/folders/1Qaqa-RnzUDOO8-Gi4zlf4BE53SfWqDwx?usp=sharing"
LICENSE = "MIT (code, LICENSE); weights: not stated"
CITATION = ("McCabe, Régaldo-Saint Blancard, Parker, Ohana, Cranmer, Bietti, Eickenberg, Golkar, Krawezik, Lanusse, "
            "Pettee, Tesileanu, Cho, Ho. Multiple Physics Pretraining for Spatiotemporal Surrogate Models. NeurIPS 2024")
PRETRAINING = ["PDEBench 2D shallow-water (swe)", "PDEBench 2D incompressible NS (incompNS)",
               "PDEBench 2D compressible NS, Rand 128 and 512, Turb (compNS)", "PDEBench 2D diffusion-reaction (diffre2d)"]
CONFIG = "config/mpp_avit_b_config.yaml"

# How upstream read each pretraining set into the slots: data_utils/hdf5_datasets.py @ 38eefb1 (each class's
# _specifics field_names, _reconstruct_sample, _get_specific_bcs), numbered by datasets.py's use_all_fields rule. The
# file fields are opzoo's names for PDEBench's files (its pdebench-groups reader: c0, c1, ...; pdebench-cfd: Vx, Vy,
# density, pressure); PDEBench's incompressible NS files (velocity [N, T, X, Y, 2], particles) have no opzoo reader:
# a file of them names its fields Vx, Vy and particles.
TRAINING_SETS = (
    opzoo.TrainingSet("swe", {"swe.h": "c0"}, source=at("data_utils/hdf5_datasets.py", TRAINED)
                      + " (SWEDataset: '<sample>/data' [T, X, Y, 1] -> h; bcs [0, 0])", periodic=False),
    opzoo.TrainingSet("diffre2d", {"diffre2d.activator": "c0", "diffre2d.inhibitor": "c1"},
                      source=at("data_utils/hdf5_datasets.py", TRAINED)
                      + " (DiffRe2DDataset: '<sample>/data' [T, X, Y, 2] -> activator, inhibitor; bcs [0, 0])",
                      periodic=False),
    opzoo.TrainingSet("incompNS", {"incompNS.Vx": "Vx", "incompNS.Vy": "Vy", "incompNS.particles": "particles"},
                      source=at("data_utils/hdf5_datasets.py", TRAINED)
                      + " (IncompNSDataset: velocity and particles concatenated -> Vx, Vy, particles; bcs [0, 0])",
                      periodic=False),
    opzoo.TrainingSet("compNS", {"compNS.Vx": "Vx", "compNS.Vy": "Vy", "compNS.density": "density",
                                 "compNS.pressure": "pressure"},
                      source=at("data_utils/hdf5_datasets.py", TRAINED)
                      + " (CompNSDataset: Vx, Vy, density, pressure stacked in that order; bcs [1, 1], periodic)",
                      periodic=True),
)

CONTRACT = opzoo.DataContract(
    name="mpp",
    fields=STATE_NAMES[:10],
    units="each sample's own: the network standardizes the history itself; 12 state slots shared by every dataset, "
          "any subset of them per sample",
    training_sets=TRAINING_SETS,
    other_fields="subset",
    other_fields_source="upstream's AViT.expand_projections, " + at("models/avit.py"),
    subset_config=("fields", "state_names"),
    unused_slots=UNUSED_SLOTS,
    unused_slots_source="as upstream numbers a new dataset's fields after the used ones, its first two in slots 10-11 "
                        "(" + at("data_utils/datasets.py", TRAINED) + " MixedDataset._build_subset_dict, use_all_fields; "
                        "appended datasets grow the projections: " + at("train_basic.py") + " L201-207)",
    grid="any grid whose axes are multiples of its patch 16 (relative position biases: nothing in the weights is tied "
         "to a grid), at least 64 (4 patches) on each axis: over fewer patches its RMS instance norms amplify a map "
         "flat over them by up to 1e8 and float32 rollouts overflow; upstream pretrained at PDEBench's 128x128 and "
         "512x512",
    resample="bilinear",
    resample_source="to the data's grid rounded up to multiples of the patch (opzoo's)",
    boundary="periodic=True or False for both axes (upstream's bcs, given with each batch): follows what the files "
             "state, or the training set a file is read as (compNS periodic, the others not)",
    boundary_follows_data="always",
    spatial_dims=(2,),
    normalization=opzoo.Normalization(
        "per-sample",
        "each sample's fields standardized over its whole history and grid inside the model ((x - mean) / (std + "
        "1e-7), std unbiased), and the prediction brought back with the same mean and std",
        source=at("models/avit.py", TRAINED) + " (AViT.forward)",
        breaks="a field constant over the whole history is standardized to 0 and predicted as that constant (as "
               "upstream); inside, its RMS instance norms divide each map by its std over the patches plus 1e-8 "
               "(" + at("models/spatial_modules.py", TRAINED) + " RMSInstanceNorm2d), so a map nearly constant over "
               "few patches (a 32x32 grid has 2x2) is amplified up to 1e8, and a rollout can outgrow float32 within "
               "a few steps (in float64 it stays finite, measured over 60 steps): the commands run it at 4 patches per axis or more, and "
               "where a rollout turns non-finite the step is said"),
)


def facts(variant: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    a, size = variant.args, variant["size"]
    return (
        Fact("weights", f"not on the Hugging Face Hub: one file per size in the Google Drive folder {DRIVE}; "
             "\"choose the configuration (Ti/S/B/L) that corresponds to the respective file\"; opzoo does not "
             "download from Drive: opzoo.load(NAME, checkpoint_path=FILE)", at("README.md") + " (Pretrained Weights)"),
        Fact("file name", f"{variant['file']} (the name the Drive folder's files go by in users' code that loads "
             "them; the folder itself could not be read here)", "third-party code loading the files (a lead, not "
             "upstream's source)", verified=False,
             alternatives=("another name: any name loads; the load check reads the size from the tensors and names "
                           "the preset a file of another size belongs to",)),
        Fact("weights file", "torch.save of {iters, epoch, model_state, optimizer_state_dict}, tensor names with "
             "DDP's 'module.' prefix (restore_checkpoint also reads a bare state dict and strips the prefix); opzoo "
             "reads it with torch.load(weights_only=True) and uses only model_state",
             at("train_basic.py") + " L165 (save_checkpoint), L168-186 (restore_checkpoint)"),
        Fact("architecture", f"AViT-{size}: width {a['dim']}, {a['depth']} space-time blocks of {a['heads']} heads "
             "(attention over time, then axial attention over the two axes; T5 relative position biases), hMLP "
             "patch stem and decoder with patch 16, 12 state slots", at(f"config/{variant['config']}") + " "
             "(basic_config: embed_dim, num_heads, processor_blocks, patch_size, n_states, block_type axial, "
             "bias_type rel); " + at("models/avit.py") + " (build_avit)"),
        Fact("parameters", f"{variant['params']:,} (upstream's build_avit from its own config file, counted on the "
             "meta device: tests/mpp/data/reference.json)", at("models/avit.py") + " (build_avit); "
             + at(f"config/{variant['config']}")),
        Fact("history", "16 frames (n_steps) at stride 1 (dt); the network takes any number, through relative "
             "position biases over time", at(f"config/{variant['config']}") + " (n_steps: 16, dt: 1)"),
        Fact("stochastic depth", "0 to 0.2 over the blocks (AViT's default drop_path=.2: build_avit does not pass the "
             "config's drop_path: 0.1 on); only in training", at("models/avit.py") + " (AViT.__init__, build_avit)"),
        Fact("position buckets", "32 buckets, bidirectional, logarithmic from distance 8 up to 32 (the bucket "
             "function's default max_distance; the module's max_distance=128 is never passed on)",
             at("models/shared_modules.py") + " (RelativePositionBias.compute_bias)"),
        Fact("state slots", "0 swe h; 1-3 incompNS Vx, Vy, particles; 4-5 diffre2d activator, inhibitor; 6-9 compNS "
             "Vx, Vy, density, pressure; 10-11 unused (use_all_fields numbers DSET_NAME_TO_OBJECT's datasets in "
             "order)", at("data_utils/datasets.py", TRAINED) + " (DSET_NAME_TO_OBJECT, _build_subset_dict); "
             + at("data_utils/hdf5_datasets.py", TRAINED) + " (field_names)"),
        Fact("training data", ", ".join(PRETRAINING) + " (basic_config's train_data_paths); the files do not "
             "record what they were trained on", at(f"config/{variant['config']}") + " (train_data_paths)",
             verified=False, alternatives=("a subset: the fine-tuning example loads a 'B16-noNS' checkpoint, one "
                                           "pretrained without a NS set",)),
        Fact("training", "DAdaptAdan (learning_rate -1), weight decay 1e-3 but not on 1-d tensors, cosine schedule "
             "over 500 epochs of 2000 samples, batch 1 x 5 accumulation per device, gradient norm clipped at 1; loss: "
             "MSE normalized by each field's mean square", at(f"config/{variant['config']}") + "; "
             + at("train_basic.py") + " (add_weight_decay, train_one_epoch)"),
        Fact("code that trained the weights", f"models/ and data_utils/ as at {TRAINED} (2023-10-07, the submission "
             "commit): unchanged since but for 462d299 (expand_projections copies the bias, fine-tuning only); "
             "the weights were linked on 2023-11-27 (e34caaf 'Updated to run pretrained weights'); torch 2.1, timm "
             "0.9.5, einops 0.7", at("requirements.txt") + " (4a41fda, pigar); git log -- models data_utils",
             verified=False, alternatives=("an earlier private revision: the tensor check compares every name and "
                                           "shape with this network",)),
        Fact("code license", "MIT", at("LICENSE")),
        Fact("weights license", "not stated", at("README.md"), verified=False,
             alternatives=("the code's MIT: check with the authors before redistributing",)),
    )


def pretrained_cfg(preset: str | None) -> dict[str, Any]:
    if preset is None:
        return dict(ANY_FILE_CFG)
    return {**ANY_FILE_CFG, "datasets": list(PRETRAINING), "license": LICENSE,
            "normalization": "per sample over the history, inside the network"}


def card_fields(variant: opzoo.Variant) -> dict[str, Any]:
    a = variant.args
    return {"size": variant["size"], "file": variant["file"], "dim": a["dim"], "heads": a["heads"],
            "depth": a["depth"], "params": f"{variant['params'] / 1e6:.1f}M", "drive": DRIVE,
            "config_file": variant["config"]}


def row(name: str, size: str, config: str, dim: int, heads: int, depth: int) -> opzoo.Variant:
    args = {"dim": dim, "heads": heads, "depth": depth}
    return opzoo.Variant(name, args=args, weights=f"MPP_AViT_{size}",
                         data={"size": size, "file": f"MPP_AViT_{size}", "config": config,
                               "params": parameter_count(dim, heads, depth, len(STATE_NAMES))})


MPP = opzoo.CheckpointFamily(
    "mpp", backbone="mpp-avit", converter="mpp", download_page=DRIVE,
    variants=(
        #   preset        size  config file              embed heads blocks
        row("mpp-avit-ti", "Ti", "mpp_avit_ti_config.yaml", 192, 3, 12),
        row("mpp-avit-s", "S", "mpp_avit_s_config.yaml", 384, 6, 12),
        row("mpp-avit-b", "B", "mpp_avit_b_config.yaml", 768, 12, 12),
        row("mpp-avit-l", "L", "mpp_avit_L_config.yaml", 1024, 16, 24),
    ),
    checks=(kit.file_args_agree("MPP AViT", file_args, shown=("dim", "heads", "depth")),),
    provenance=facts, pretrained_cfg=lambda v: pretrained_cfg(v.name),
    card=files("opzoo_mpp") / "model_cards" / "mpp.md", card_fields=card_fields, contract=CONTRACT,
)

PLUGIN = kit.FamilyPlugin(MPP, backbones={"mpp-avit": MppAViT}, converters={"mpp": convert_mpp},
                          upstreams={"mpp-avit": ("mpp-avit", build_upstream_mpp)})

__all__ = ["CONTRACT", "MPP", "PLUGIN", "facts", "HEAD"]

"""Walrus's published checkpoint as a one-row table, where each fact about it comes from, its data contract, and the
plugin's registration (its entry point is :data:`PLUGIN`).

Sources: Hugging Face polymathic-ai/walrus @ f8fd578 (``walrus.pt``, ``extended_config.yaml``), whose config
PolymathicAI/walrus's notebook prints whole with the module tree it builds (``demo_notebooks/
walrus_example_1_RunningWalrus.ipynb`` @ 3cd747c); PolymathicAI/walrus ``walrus/models/isotropic_model.py`` @ f141d0c
and ``walrus/models/spatial_blocks/full_attention.py`` @ 79631b8 (the two model files of the main repository readable
here); the full code in Polymathic AI's fork PolymathicAI/walrus_steering @ e963fad; FhG-IISB/foundax @ 7a90e3a
``repos/jax_walrus`` for the parts neither holds."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import opzoo
from opzoo import kit

from .backbone import DEFAULT_FIELDS, RMS_FLOOR, Walrus
from .converter import ANY_FILE_CFG, HUB_REPO, HUB_REVISION, UPSTREAM, WEIGHTS_FILE, at, convert_walrus, file_args
from .fields import FIELD_INDEX_MAP
from .network import parameter_count
from .upstream import build_upstream_walrus

README = at("README.md", "d0749fe", UPSTREAM)
LICENSE = "MIT (the code: " + README + "); the weights' license is not stated in the repository"
NOTEBOOK = at("demo_notebooks/walrus_example_1_RunningWalrus.ipynb", "3cd747c", UPSTREAM)
ISOTROPIC = at("walrus/models/isotropic_model.py", "f141d0c", UPSTREAM)
FORK_NOTE = at("walrus_steering/walrus_steering/models/isotropic_model.py")
PORT = "FhG-IISB/foundax repos/jax_walrus/jax_walrus/model_eqx.py @ 7a90e3a"
PRETRAINING = ("active_matter", "planetswe", "acoustic_scattering_maze", "acoustic_scattering_inclusions",
               "acoustic_scattering_discontinuous", "euler_multi_quadrants_openBC", "euler_multi_quadrants_periodicBC",
               "gray_scott_reaction_diffusion", "rayleigh_benard", "shear_flow", "turbulent_radiative_layer_2D",
               "helmholtz_staircase", "viscoelastic_instability", "supernova_explosion_128",
               "turbulence_gravity_cooling", "turbulent_radiative_layer_3D", "MHD_64", "rayleigh_taylor_instability",
               "flowbench_FPO_NS_2D_512x128_harmonics")

# How upstream read the pretraining sets whose fields it transformed (the published config's well_dataset_info
# field_transforms, renamed by MixedWellDataset's update_field_names: "<transform>_<field>"); every other set's fields
# are read by their own names. step_downsample_factor 0.5 halves those sets' history (3 frames of the 6).
TRANSFORMS = NOTEBOOK + " (data.module_parameters.well_dataset_info field_transforms); " + at(
    "walrus_steering/walrus_steering/data/multidataset.py") + " (update_field_names)"
HALF_HISTORY = "upstream pretrained on 3 frames of history for this set (step_downsample_factor 0.5)"
TRAINING_SETS = tuple(
    [opzoo.TrainingSet(name, {"zeros_like_density": "density * 0"}, source=TRANSFORMS,
                       note="density: torch.zeros_like, read as the slot zeros_like_density (the field is dropped)")
     for name in ("acoustic_scattering_maze", "acoustic_scattering_inclusions", "acoustic_scattering_discontinuous")]
    + [opzoo.TrainingSet(name, {"log10_density": "log10(density)", "log10_temperature": "log10(temperature)"},
                         source=TRANSFORMS, note="density, temperature: torch.log10; " + HALF_HISTORY)
       for name in ("supernova_explosion_128", "turbulence_gravity_cooling", "turbulent_radiative_layer_3D")]
    + [opzoo.TrainingSet(name, {}, source=TRANSFORMS, note=HALF_HISTORY)
       for name in ("MHD_64", "rayleigh_taylor_instability")])

CONTRACT = opzoo.DataContract(
    name="walrus",
    fields=FIELD_INDEX_MAP[3:],
    training_sets=TRAINING_SETS,
    units="each sample's own: the network divides each field by its RMS over the history and grid itself; 64 field "
          "slots shared by every dataset (The Well's names), any subset of them per sample",
    other_fields="subset",
    other_fields_source="upstream's align_checkpoint_with_field_to_index_map (a new field: a new slot, its stem "
                        "columns and decoder rows new, every other tensor kept; the notebook's 'blubber' example, "
                        + NOTEBOOK + ")",
    subset_config=("fields", "field_names"),
    grid="32 tokens per axis in 2-D (each axis 32, 128, 256, 384, 512, 768 or 1024), 16 in 3-D (16, 64, 128, 192, "
         "256, 384 or 512): the stem's strides follow the grid (upstream's choose_kernel_size_deterministic, "
         + at("walrus_steering/walrus_steering/models/shared_utils/flexi_utils.py") + "); another grid is resampled up to the next "
         "size it takes",
    resample="bilinear",
    resample_source="to the next grid the stem takes (opzoo's; upstream ran The Well's grids as they are)",
    boundary="each axis periodic, wall or open (The Well's codes), per side, given with the data "
             "(model_args boundaries): the stem pads a wall or open side with zeros and flags which, a periodic axis "
             "circularly; 2-D data's added third axis is periodic",
    boundary_follows_data="always",
    spatial_dims=(2, 3),
    normalization=opzoo.Normalization(
        "per-sample",
        "each sample's fields divided by their RMS over the whole history and grid (no mean subtracted), inside the "
        "model; the network predicts the change to the next frame divided by the RMS of the history's frame-to-frame "
        "changes, and the output is the last frame plus it (prediction_type delta, SamplewiseRevNormalization)",
        source=at("walrus_steering/walrus_steering/trainer/training.py") + " (SamplewiseRevNormalization, Trainer.rollout_model)",
        breaks=f"a field constant in time has no change to scale by: its RMS of changes is raised to {RMS_FLOOR} (as "
               "upstream), so the prediction's change to it is at most of that order; a field zero everywhere (a "
               f"padded velocity_z) is divided by {RMS_FLOOR} and stays 0"),
)


def facts(variant: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    a = variant.args
    return (
        Fact("weights", f"Hugging Face {HUB_REPO} @ {HUB_REVISION[:7]}, {WEIGHTS_FILE} (5,145,064,530 bytes) and "
             "extended_config.yaml", NOTEBOOK + " (its download cell prints both, the revision and the size)"),
        Fact("weights file", "a coalesced torch.distributed.checkpoint of {'app': {'model': ...}}; the published file "
             "holds the model alone (its size is the 1,286,199,047 float32 parameters and 268 kB); opzoo reads it "
             "with torch.load(weights_only=True) and uses only ['app']['model']",
             at("walrus_steering/walrus_steering/trainer/checkpoints.py") + " (AppState, CheckPointLoader.load); " + NOTEBOOK),
        Fact("architecture", f"IsotropicModel: width {a.get('hidden', 1408)}, {a.get('depth', 40)} SpaceTimeSplitBlocks "
             f"of {a.get('heads', 16)} heads (causal attention over time with a T5 relative bias, then full attention "
             "over the frame's tokens with axial RoPE, fused with a SwiGLU MLP), a SpaceBag adaptive-stride stem "
             "(8 then 4 per axis, strides by grid) and decoder, RMS group norms",
             NOTEBOOK + " (extended_config.yaml model: and the module tree it prints)"),
        Fact("parameters", f"{variant['params']:,} (the fork's parts at the published sizes, counted on the meta "
             "device, without its two layer scales per block: tests/walrus/data/reference.json; the README's 1.29 "
             "billion)", at("walrus_steering/walrus_steering/models/")),
        Fact("code that trained the weights", "PolymathicAI/walrus (not fetchable here): its isotropic_model.py and "
             "full_attention.py are read; the rest follows Polymathic AI's fork walrus_steering @ e963fad where the "
             "two agree. They differ: the fork projects fields with a SubsampledLinear before the stem and pads with "
             "learned tokens; upstream feeds the fields to the stem, whose first kernel's columns are the fields' slots "
             "and three boundary-flag slots (SpaceBagAdaptiveDVstrideEncoder), and pads with constant zeros and flag "
             "channels (FixedPatchJittererBoundaryPad); the fork's layer scales (gamma_att, gamma) are gone upstream; "
             "ff_out is a bare Linear upstream",
             ISOTROPIC + "; " + at("walrus/models/spatial_blocks/full_attention.py", "79631b8", UPSTREAM) + "; " + FORK_NOTE,
             verified=False,
             alternatives=("the load check compares every tensor name and shape with this network",)),
        Fact("stem, padding and decoder", "the SpaceBag stem's columns (fields' slots, then flags [2, 0, 1], all but "
             "the last two scaled by sqrt((n_states - 3) / (C - 3))), the boundary padding and its flags, and the "
             "decoder's periodic wrap follow the JAX port, which its authors checked against the real checkpoint at "
             "atol = rtol = 5e-2 (opzoo matches the port in float64 to 1e-13: tests/walrus/test_parity.py)",
             PORT, verified=False,
             alternatives=("upstream's own vstride_encoder.py, vstride_decoder.py and patch_jitterers.py, not readable "
                           "here: a user with the file and the code can run tests/walrus/record_reference.py against "
                           "them",)),
        Fact("normalization epsilon", "RMSGroupNorm's forward passes no eps to F.rms_norm (the dtype's epsilon); the "
             "1e-6 it prints is never used; the port adds 1e-6", at("walrus_steering/walrus_steering/models/shared_utils/"
             "normalization.py"), verified=False,
             alternatives=("upstream's normalization.py, not readable here, passing its eps: a relative difference "
                           "of about 1e-6 / (a channel's mean square) in each norm",)),
        Fact("jitter", "jitter_patches: true: at inference too, the padded grid is rolled by a random amount (within "
             "the padding on a wall or open axis, within half the axis on a periodic one) and the tokens along every "
             "periodic axis before each block (no training check upstream); opzoo draws from torch's generator "
             "(upstream: torch and numpy's); jitter=False is the deterministic network",
             ISOTROPIC + " (IsotropicModel.forward); " + PORT + " (_jitter_forward)"),
        Fact("history", "6 frames (n_steps_input), dt stride 1 to 5 in training; the network takes any number (T5 "
             "relative bias over time, causal)", NOTEBOOK + " (data.module_parameters)"),
        Fact("stochastic depth", "0 to 0.05 over the 40 blocks; only in training", NOTEBOOK + " (model.drop_path)"),
        Fact("field slots", "67: closed_boundary, open_boundary, bias_correction (the padding flags), then The Well's "
             "fields by name", NOTEBOOK + " (data.field_index_map_override)"),
        Fact("training data", ", ".join(PRETRAINING) + "; 2-D data padded to 3-D (zero third components)",
             NOTEBOOK + " (data.module_parameters.well_dataset_info); " + at("walrus_steering/walrus_steering/data/"
                                                                             "inflated_dataset.py")),
        Fact("training", "AdamW lr 2e-4, weight decay 1e-4, eps 1e-10; inverse-sqrt schedule with 10 warm-up and 10 "
             "cool-down epochs; 200 epochs; batch 2 x 4 accumulation per device; MAE on the normalized change x 100; "
             "gradient clip 10", NOTEBOOK + " (trainer, optimizer, lr_scheduler)"),
        Fact("code license", "MIT (\"This project is licensed under the MIT License\")", README + "; the fork's "
             + at("walrus_steering/LICENSE")),
        Fact("weights license", "not stated: the repository's README licenses the project as MIT and links the Hub "
             "repo; the Hub repo's own license tag could not be read here", README, verified=False,
             alternatives=("MIT, as the code: check the Hub page before redistributing the weights",)),
    )


def pretrained_cfg(preset: str | None) -> dict[str, Any]:
    if preset is None:
        return dict(ANY_FILE_CFG)
    return {**ANY_FILE_CFG, "datasets": list(PRETRAINING), "license": LICENSE,
            "normalization": "per sample over the history (RMS), inside the network; predicts the change"}


def card_fields(variant: opzoo.Variant) -> dict[str, Any]:
    a = variant.args
    return {"hidden": a.get("hidden", 1408), "heads": a.get("heads", 16), "depth": a.get("depth", 40),
            "params": f"{variant['params'] / 1e9:.2f}B", "hub_repo": HUB_REPO, "revision": HUB_REVISION[:7],
            "file": WEIGHTS_FILE}


WALRUS = opzoo.CheckpointFamily(
    "walrus", backbone="walrus", repo_id=HUB_REPO, revision=HUB_REVISION, converter="walrus",
    variants=(opzoo.Variant("walrus", args={"fields": DEFAULT_FIELDS}, weights=WEIGHTS_FILE,
                            data={"params": parameter_count(len(FIELD_INDEX_MAP), 1408, 16, 40, 352, 16)}),),
    checks=(kit.file_args_agree("Walrus", file_args, shown=("hidden", "heads", "depth", "inner")),),
    provenance=facts, pretrained_cfg=lambda v: pretrained_cfg(v.name),
    card=files("opzoo_walrus") / "model_cards" / "walrus.md", card_fields=card_fields, contract=CONTRACT,
)

PLUGIN = kit.FamilyPlugin(WALRUS, backbones={"walrus": Walrus}, converters={"walrus": convert_walrus},
                          upstreams={"walrus-fork": ("walrus", build_upstream_walrus)})

__all__ = ["CONTRACT", "WALRUS", "PLUGIN", "facts"]

"""Where each fact about the pdet-* presets comes from: tum-pbs/pde-transformer at a commit (fetched with its history)
and the ``pdetransformer`` 0.1.11 wheel on PyPI (its model code is the repo's, CRLF line ends aside)."""

from __future__ import annotations

import opzoo

REPO = "tum-pbs/pde-transformer"
HEAD = "850e09d"  # 2026-04-11, the newest commit; the model code last changed in 3f3adee (2025-06-23)
MODEL_CODE = "3f3adee"
HUB_REPO = "thuerey-group/pde-transformer"
DOCS_URL = f"https://github.com/{REPO}/blob/{HEAD}/docs/pretrained-weights.md"
# docs/pretrained-weights.md @ 850e09d: nRMSE after 1 and 10 autoregressive steps on the pretraining datasets
REPORTED_NRMSE = {"mc-s": (0.044, 0.36), "mc-b": (0.038, 0.31), "mc-l": (0.034, 0.27),
                  "sc-s": (0.043, 0.34), "sc-b": (0.037, 0.29), "sc-l": (0.034, 0.26)}
PUBLISHED_PARAMS = {"mc-s": "~33M", "mc-b": "~130M", "mc-l": "~518M", "sc-s": "~46M", "sc-b": "~178M", "sc-l": "~701M"}
# pdetransformer/data/metadata_remapping.py @ 3f3adee all_pdes: the class label is the PDE's index here
TASKS = ("unknown", "advection", "diffusion", "advection-diffusion", "dispersion", "hyper-diffusion", "burgers",
         "korteweg-de-vries", "kuramoto-sivashinsky", "fisher-kpp", "gray scott", "swift-hohenberg",
         "navier-stokes: incompressible cylinder flow", "navier-stokes: compressible cylinder flow",
         "navier-stokes: isotropic turbulence", "navier-stokes: decaying turbulence", "navier-stokes: kolmogorov flow",
         "navier-stokes: channel flow", "navier-stokes: transitional boundary layer", "magnetohydrodynamic turbulence",
         "turbulent radiative layer", "active matter", "viscoelastic instability", "helmholtz",
         "rayleigh benard convection", "navier-stokes: shear flow", "euler", "piso: channel flow")

# pdetransformer/data/metadata_remapping.py @ 3f3adee all_fields, as Python reads it: a missing comma joins its first
# two entries into "unknownvelocity" (so neither "unknown" nor "velocity" can be encoded), and every later index is one
# less than the list as written
FIELDS = ("unknownvelocity", "velocity x", "velocity y", "velocity z", "vorticity", "density", "pressure",
          "concentration", "concentration a", "concentration b", "magnetic field x", "magnetic field y",
          "magnetic field z", "vector potential x", "vector potential y", "vector potential z", "orientation xx",
          "orientation xy", "orientation yx", "orientation yy", "strain xx", "strain xy", "strain yx", "strain yy",
          "conformation xx", "conformation xy", "conformation yx", "conformation yy", "conformation zz",
          "pressure (real)", "pressure (imaginary)", "mask", "buoyancy", "energy", "deformation xx", "deformation yy",
          "deformation zz")


def at(path: str, commit: str = MODEL_CODE) -> str:
    return f"{REPO} {path} @ {commit}"


def mixed_facts(subfolder: str, size: str) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    train_cfg = f"config/ape_2d/supervised/pde-{subfolder}-mse.yaml"
    return (
        Fact("Hub repo", f"{HUB_REPO}, subfolder {subfolder}", at("docs/pretrained-weights.md", HEAD)),
        Fact("weights file", "diffusion_pytorch_model.safetensors and config.json in the subfolder (diffusers' "
             "ModelMixin.save_pretrained names)", at("docs/pretrained-weights.md", HEAD) + " (from_pretrained(repo, "
             "subfolder=...)); the Hub listing could not be read here", verified=False,
             alternatives=("diffusion_pytorch_model.bin (a pickle: refused, opzoo loads safetensors only)",)),
        Fact("architecture", f"mixed channels, {size}: hidden 96/192/384 (S/B/L), heads 4/8/16, depth "
             "[2, 5, 8, 5, 2], window 8, patch 4, MLP ratio 4, 1000 class labels + 1, carrier tokens off",
             at("pdetransformer/core/mixed_channels/pde_transformer.py") + " (PDE_S/B/L, PDEImpl); " + at(train_cfg)),
        Fact("size of the checkpoint", f"{subfolder} is {size} (the docs' table: mc-b Base, hidden 192; mc-l Large, "
             "hidden 384); read from the subfolder's config.json at load", at("docs/pretrained-weights.md", HEAD)
             + "; " + at("config/ape_2d/supervised/pde-mc-b-mse.yaml") + " says type PDE-L and "
             + at("config/ape_2d/supervised/pde-mc-l-mse.yaml") + " PDE-B (swapped)", verified=False,
             alternatives=("mc-b and mc-l swapped, as the training configs say: the load check refuses a "
                           "config.json of another size and says which to load",)),
        Fact("code that trained the weights", "not public: the weights predate the repository (first commit "
             "2025-05-27); the model code is unchanged since 3f3adee and is the PyPI wheel pdetransformer 0.1.11's",
             at("pdetransformer/core/mixed_channels/pde_transformer.py", HEAD) + " (git log); PyPI pdetransformer "
             "0.1.11", verified=False,
             alternatives=("an earlier private revision computing another function: the load checks compare "
                           "config.json and every tensor's name and shape with this network",)),
        Fact("input and output", "one frame [B, 2, H, W] channels-first to the next frame; a PDE with one field has "
             "its second channel zero-padded (max_channels 2) and its padded output channel set to zero",
             at("pdetransformer/core/mixed_channels/train_supervised.py") + " (get_input, training_step, "
             "postprocess_output); " + at("config/ape_2d/data/multi_task_norm.yaml")),
        Fact("time and task conditioning", "diffusion time 0 for a supervised step (None -> 0, scaled by 1000); the "
             "class label is the PDE's index in all_pdes (opzoo_pdet.TASKS), dropped to the 'no label' class with "
             "probability 0.1 in training",
             at("pdetransformer/core/mixed_channels/pde_transformer.py") + " (PDEImpl.forward, LabelEmbedder); "
             + at("pdetransformer/data/metadata_remapping.py") + " (all_pdes, convert_pde)"),
        Fact("boundary conditions", "periodic=True (shifted windows wrap around); periodic=False masks the wrap as "
             "Swin does; a constructor flag of the network, recorded in config.json",
             at(train_cfg) + " (periodic: True); " + at("pdetransformer/core/mixed_channels/pde_transformer.py")
             + " (PDEStage.get_attn_mask)"),
        Fact("normalization", "per-dataset mean/std of each field, applied by the data pipeline, not the network: "
             "inputs must be standardized as in pretraining (normalization='zscore' with mean/std does it inside "
             "the model)", at("config/ape_2d/data/multi_task_norm.yaml") + " (normalize_data: mean-std); "
             + at("pdetransformer/data/pbdl_dataloader/normalization.py")),
        Fact("normalization stats", "the pretraining datasets' mean/std live in their PBDL files, not in the "
             "checkpoint; none is shipped here", at("pdetransformer/data/pbdl_dataloader/normalization.py")
             + " (norm_fields_sca_mean/std cached in the dataset files)", verified=False,
             alternatives=("fields on another scale: the network sees inputs it was not trained on",)),
        Fact("training", "100 epochs, AdamW lr 4e-5, batch 8 x 8 accumulated, bf16-mixed, EMA 0.999, MSE on the "
             "next frame", at(train_cfg)),
        Fact("EMA weights published", "unknown whether the Hub weights are the EMA's", at(train_cfg)
             + " (callbacks.ema)", verified=False, alternatives=("the raw weights",)),
        Fact("reported nRMSE", "nRMSE1 {:.3f}, nRMSE10 {:.2f} on the pretraining datasets, as reported by the "
             "authors".format(*REPORTED_NRMSE[subfolder]), DOCS_URL),
        Fact("published parameters", PUBLISHED_PARAMS[subfolder], at("docs/pretrained-weights.md", HEAD)),
        Fact("code license", "Apache-2.0 in LICENSE.txt; MIT in README.md and the wheel's metadata",
             at("LICENSE.txt", HEAD) + "; " + at("README.md", HEAD) + "; PyPI pdetransformer 0.1.11 METADATA",
             verified=False, alternatives=("MIT", "Apache-2.0")),
        Fact("weights license", "not stated", "the Hub repo's card could not be read here", verified=False,
             alternatives=("a license on the Hub card: check it before redistributing",)),
    )


def separate_facts(subfolder: str, size: str) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    train_cfg = f"config/ape_2d/supervised/pde-{subfolder}-mse.yaml"
    code = "pdetransformer/core/separate_channels/pde_transformer.py"
    shared = {f.topic: f for f in mixed_facts("mc-s", size)}
    return (
        Fact("Hub repo", f"{HUB_REPO}, subfolder {subfolder}", at("docs/pretrained-weights.md", HEAD)),
        shared["weights file"],
        Fact("architecture", f"separate channels, {size}: hidden 96/192/384 (S/B/L), heads 4/8/16, depth "
             "[2, 5, 8, 5, 2], window 8, patch 4, MLP ratio 4, 2 frame slots per channel, window attention per "
             "channel then attention across channels, 1000 labels, carrier tokens off",
             at(code) + " (PDE_S/B/L, PDEImpl, HATDiTBlock); " + at(train_cfg)),
        shared["code that trained the weights"],
        Fact("input and output", "per channel two frame slots, the known frame then zeros; the network's second slot "
             "is the prediction (supervised forward prediction, m=1, n=1, task 0); any number of channels",
             at("pdetransformer/core/separate_channels/train_supervised.py") + " (Supervised, get_model_input, "
             "MultiStepMSE.predict); " + at("pdetransformer/core/separate_channels/tasks.py") + " (ForwardPrediction)"
             + "; " + at(train_cfg) + " (timesteps: 2)"),
        Fact("conditioning", "per channel: diffusion time 0, the field type (FIELDS index), the PDE (TASKS index), "
             "the task (0); simulation time, time step and PDE parameters are embedded and multiplied by 0.0",
             at(code) + " (PDEImpl.forward, SIMULATION_TIME_SCALING = 0.0 and the others); "
             + at("pdetransformer/data/metadata_remapping.py") + " (all_fields, all_pdes)"),
        Fact("field type encoding", "all_fields lacks a comma after \"unknown\": index 0 is \"unknownvelocity\", "
             "\"velocity x\" is 1, and \"unknown\" or \"velocity\" cannot be encoded (opzoo_pdet.FIELDS is the list "
             "as Python reads it)", at("pdetransformer/data/metadata_remapping.py") + " (convert_fields)"),
        Fact("boundary conditions", "periodic=True in training (the class default is False), recorded in config.json",
             at(train_cfg) + " (periodic: True); " + at(code) + " (PDETransformer.__init__)"),
        shared["normalization"], shared["normalization stats"],
        Fact("training", "100 epochs, AdamW lr 4e-5, batch 8 x 8 accumulated, bf16-mixed, EMA 0.999, 256x256, MSE on "
             "the predicted slot", at(train_cfg)),
        shared["EMA weights published"],
        Fact("reported nRMSE", "nRMSE1 {:.3f}, nRMSE10 {:.2f} on the pretraining datasets, as reported by the "
             "authors".format(*REPORTED_NRMSE[subfolder]), DOCS_URL),
        Fact("published parameters", PUBLISHED_PARAMS[subfolder], at("docs/pretrained-weights.md", HEAD)),
        shared["code license"], shared["weights license"],
    )


def reported_result(subfolder: str) -> opzoo.Result:
    return opzoo.Result("APE-2D pretraining datasets", "nRMSE1", REPORTED_NRMSE[subfolder][0], "PDE-Transformer's authors",
                        source=DOCS_URL, split="test",
                        metric_name="normalized RMSE after one autoregressive step (as reported by the authors)")

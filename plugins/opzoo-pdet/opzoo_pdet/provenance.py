"""Where each fact about the pdet-* presets comes from: tum-pbs/pde-transformer at a commit (fetched with its history)
and the ``pdetransformer`` 0.1.11 wheel on PyPI (its model code is the repo's, CRLF line ends aside).

The rules here are functions of a row of a family's table (:class:`opzoo.Variant`, in ``families.py``): its
``subfolder``, ``size``, ``nrmse`` and ``published_params``."""

from __future__ import annotations

from typing import Any

import opzoo

REPO = "tum-pbs/pde-transformer"
HEAD = "850e09d"  # 2026-04-11, the newest commit; the model code last changed in 3f3adee (2025-06-23)
MODEL_CODE = "3f3adee"
HUB_REPO = "thuerey-group/pde-transformer"
DOCS_URL = f"https://github.com/{REPO}/blob/{HEAD}/docs/pretrained-weights.md"
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


def train_config(variant: opzoo.Variant) -> str:
    """The training config of ``variant``'s checkpoint in upstream's repository."""
    return f"config/ape_2d/supervised/pde-{variant['subfolder']}-mse.yaml"


def shared_facts(variant: opzoo.Variant, code: str) -> dict[str, opzoo.Fact]:
    """The facts both networks share, each cited at the network's own files (``code``, its training config)."""
    Fact = opzoo.Fact
    train_cfg = train_config(variant)
    return {
        "Hub repo": Fact("Hub repo", f"{HUB_REPO}, subfolder {variant['subfolder']}",
                         at("docs/pretrained-weights.md", HEAD)),
        "weights file": Fact("weights file", "diffusion_pytorch_model.safetensors and config.json in the subfolder "
                             "(diffusers' ModelMixin.save_pretrained names)", at("docs/pretrained-weights.md", HEAD)
                             + " (from_pretrained(repo, subfolder=...)); the Hub listing could not be read here",
                             verified=False,
                             alternatives=("diffusion_pytorch_model.bin (a pickle: refused, opzoo loads safetensors "
                                           "only)",)),
        "Hub revision": Fact("Hub revision", "not pinned: the Hub repo's commits could not be read here, so a load "
                             "takes main; the load checks record the commit they read (the snapshot in the Hugging "
                             "Face cache), and `opzoo verify` prints it", f"huggingface.co/{HUB_REPO} (not reachable "
                             "offline)", verified=False,
                             alternatives=("weights replaced on main since these presets were written: the config "
                                           "and tensor checks refuse another network",)),
        "code that trained the weights": Fact(
            "code that trained the weights", "not public: the weights predate the repository (first commit "
            "2025-05-27); the model code is unchanged since 3f3adee and is the PyPI wheel pdetransformer 0.1.11's",
            at(code, HEAD) + " (git log); PyPI pdetransformer 0.1.11", verified=False,
            alternatives=("an earlier private revision computing another function: the load checks compare "
                          "config.json and every tensor's name and shape with this network",)),
        "training grid": Fact("training grid", "256x256: the APE-2D files are simulated at 2048x2048 and stored "
                              "average-pooled to 256x256, and the data module reads them as stored "
                              "(downsample_factor 1); config.json's sample_size is a diffusers field the supervised "
                              "forward never reads. Fine-tuning keeps the data's own grid (no resolution-bound "
                              "embedding)", at("pdetransformer/data/simulations_apebench/simulation.py", HEAD)
                              + " (low_res: reshape to 256x8, mean); " + at("docs/datasets/ape_2d.md", HEAD)
                              + " (Data Format); " + at("config/ape_2d/data/multi_task_norm.yaml", HEAD)),
        "normalization": Fact("normalization", "per-dataset mean/std of each field, applied by the data pipeline, "
                              "not the network: inputs must be standardized as in pretraining (normalization='zscore' "
                              "with mean/std does it inside the model)", at("config/ape_2d/data/multi_task_norm.yaml")
                              + " (normalize_data: mean-std); " + at("pdetransformer/data/pbdl_dataloader/normalization.py")),
        "normalization stats": Fact("normalization stats", "the pretraining datasets' mean/std live in their PBDL "
                                    "files, not in the checkpoint; none is shipped here",
                                    at("pdetransformer/data/pbdl_dataloader/normalization.py")
                                    + " (norm_fields_sca_mean/std cached in the dataset files)", verified=False,
                                    alternatives=("fields on another scale: the network sees inputs it was not "
                                                  "trained on",)),
        "EMA weights published": Fact("EMA weights published", "unknown whether the Hub weights are the EMA's",
                                      at(train_cfg) + " (callbacks.ema)", verified=False,
                                      alternatives=("the raw weights",)),
        "code license": Fact("code license", "Apache-2.0 in LICENSE.txt; MIT in README.md and the wheel's metadata",
                             at("LICENSE.txt", HEAD) + "; " + at("README.md", HEAD) + "; PyPI pdetransformer 0.1.11 "
                             "METADATA", verified=False, alternatives=("MIT", "Apache-2.0")),
        "weights license": Fact("weights license", "not stated", "the Hub repo's card could not be read here",
                                verified=False,
                                alternatives=("a license on the Hub card: check it before redistributing",)),
        "reported nRMSE": Fact("reported nRMSE", "nRMSE1 {:.3f}, nRMSE10 {:.2f} on the pretraining datasets, as "
                               "reported by the authors".format(*variant["nrmse"]), DOCS_URL),
        "published parameters": Fact("published parameters", variant["published_params"],
                                     at("docs/pretrained-weights.md", HEAD)),
    }


def opening(shared: dict[str, opzoo.Fact]) -> tuple[opzoo.Fact, ...]:
    """The facts that open both networks' lists: where the weights are."""
    return tuple(shared[k] for k in ("Hub repo", "weights file", "Hub revision"))


def trained(shared: dict[str, opzoo.Fact], loss: str, train_cfg: str) -> tuple[opzoo.Fact, ...]:
    """The facts that close both networks' lists: normalization, the training recipe (``loss``: what differs), the
    published weights' EMA, results, counts and licenses."""
    recipe = opzoo.Fact("training", "100 epochs, AdamW lr 4e-5, batch 8 x 8 accumulated, bf16-mixed, EMA 0.999, "
                        + loss, at(train_cfg))
    return (shared["normalization"], shared["normalization stats"], recipe, *(shared[k] for k in (
        "EMA weights published", "reported nRMSE", "published parameters", "code license", "weights license")))


def mixed_facts(variant: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    subfolder, size, train_cfg = variant["subfolder"], variant["size"], train_config(variant)
    code = "pdetransformer/core/mixed_channels/pde_transformer.py"
    shared = shared_facts(variant, code)
    return (
        *opening(shared),
        Fact("architecture", f"mixed channels, {size}: hidden 96/192/384 (S/B/L), heads 4/8/16, depth "
             "[2, 5, 8, 5, 2], window 8, patch 4, MLP ratio 4, 1000 class labels + 1, carrier tokens off",
             at(code) + " (PDE_S/B/L, PDEImpl); " + at(train_cfg)),
        Fact("size of the checkpoint", f"{subfolder} is {size} (the docs' table: mc-b Base, hidden 192; mc-l Large, "
             "hidden 384); read from the subfolder's config.json at load", at("docs/pretrained-weights.md", HEAD)
             + "; " + at("config/ape_2d/supervised/pde-mc-b-mse.yaml") + " says type PDE-L and "
             + at("config/ape_2d/supervised/pde-mc-l-mse.yaml") + " PDE-B (swapped)", verified=False,
             alternatives=("mc-b and mc-l swapped, as the training configs say: the load check refuses a "
                           "config.json of another size and says which to load",)),
        shared["code that trained the weights"], shared["training grid"],
        Fact("input and output", "one frame [B, 2, H, W] channels-first to the next frame; a PDE with one field has "
             "its second channel zero-padded (max_channels 2, field id 0), and in a rollout the padded output "
             "channel is set to zero before it is fed back; opzoo pads with 0.0 and zeroes it the same way",
             at("pdetransformer/data/multi_module.py", HEAD) + " (pad channels: torch.zeros); "
             + at("pdetransformer/core/mixed_channels/train_supervised.py", HEAD) + " (get_input, training_step, "
             "predict, postprocess_output: Fields > 0); " + at("config/ape_2d/data/multi_task_norm.yaml")),
        Fact("time and task conditioning", "diffusion time 0 for a supervised step (None -> 0, scaled by 1000); the "
             "class label is each sample's PDE, its index in all_pdes (opzoo_pdet.TASKS: task_id, an int or one per "
             "sample), dropped to the 'no label' class with probability 0.1 in training",
             at(code) + " (PDEImpl.forward, LabelEmbedder); "
             + at("pdetransformer/core/mixed_channels/train_supervised.py", HEAD) + " (get_input: "
             "physical_metadata['PDE'][:, 0], per sample); " + at("pdetransformer/data/metadata_remapping.py")
             + " (all_pdes, convert_pde)"),
        Fact("boundary conditions", "periodic=True (shifted windows wrap around); periodic=False masks the wrap as "
             "Swin does; a constructor flag of the network, recorded in config.json; fine-tuning follows a file "
             "that states its boundary", at(train_cfg) + " (periodic: True); " + at(code)
             + " (PDEStage.get_attn_mask)"),
        *trained(shared, "MSE on the next frame", train_cfg),
    )


def separate_facts(variant: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    size, train_cfg = variant["size"], train_config(variant)
    code = "pdetransformer/core/separate_channels/pde_transformer.py"
    supervised = "pdetransformer/core/separate_channels/train_supervised.py"
    shared = shared_facts(variant, code)
    return (
        *opening(shared),
        Fact("architecture", f"separate channels, {size}: hidden 96/192/384 (S/B/L), heads 4/8/16, depth "
             "[2, 5, 8, 5, 2], window 8, patch 4, MLP ratio 4, 2 frame slots per channel, window attention per "
             "channel then attention across channels, 1000 labels, carrier tokens off",
             at(code) + " (PDE_S/B/L, PDEImpl, HATDiTBlock); " + at(train_cfg)),
        shared["code that trained the weights"], shared["training grid"],
        Fact("input and output", "per channel two frame slots, the known frame then zeros; the network's second slot "
             "is the prediction (supervised forward prediction, m=1, n=1, task 0); any number of channels, so a "
             "file's own count is used and nothing is padded; in a rollout a channel of field type 0 (their "
             "padding) is fed back as zeros",
             at(supervised) + " (Supervised, get_model_input, MultiStepMSE.predict; Supervised.predict: 'set to "
             "zero where channel_id is zero'); " + at("pdetransformer/core/separate_channels/tasks.py")
             + " (ForwardPrediction); " + at(train_cfg) + " (timesteps: 2)"),
        Fact("conditioning", "per channel: diffusion time 0, the field type (FIELDS index), the PDE (TASKS index), "
             "the task (0), per sample as their data labels each; simulation time, time step and PDE parameters are "
             "embedded and multiplied by 0.0",
             at(code) + " (PDEImpl.forward, SIMULATION_TIME_SCALING = 0.0 and the others); "
             + at("pdetransformer/data/metadata_remapping.py") + " (all_fields, all_pdes)"),
        Fact("field type encoding", "all_fields lacks a comma after \"unknown\": index 0 is \"unknownvelocity\", "
             "\"velocity x\" is 1, and \"unknown\" or \"velocity\" cannot be encoded (opzoo_pdet.FIELDS is the list "
             "as Python reads it)", at("pdetransformer/data/metadata_remapping.py") + " (convert_fields)"),
        Fact("boundary conditions", "periodic=True in training (the class default is False), recorded in "
             "config.json; fine-tuning follows a file that states its boundary",
             at(train_cfg) + " (periodic: True); " + at(code) + " (PDETransformer.__init__)"),
        *trained(shared, "256x256, MSE on the predicted slot", train_cfg),
    )


def reported_result(variant: opzoo.Variant) -> tuple[opzoo.Result, ...]:
    return (opzoo.Result("APE-2D pretraining datasets", "nRMSE1", variant["nrmse"][0], "PDE-Transformer's authors",
                         source=DOCS_URL, split="test",
                         metric_name="normalized RMSE after one autoregressive step (as reported by the authors)"),)


TRAIN_LR = 4e-5  # config/ape_2d/supervised/pde-{mc,sc}-*-mse.yaml trainer.base_learning_rate
# Both were trained at 256x256: their APE-2D files are simulated at 2048x2048 and stored average-pooled to 256x256
# (pdetransformer/data/simulations_apebench/simulation.py @ 850e09d, low_res; docs/datasets/ape_2d.md @ 850e09d, "For
# training/inference we downsample the spatial resolution to 256x256"), and their data module reads them as stored
# (config/ape_2d/data/multi_task_norm.yaml @ 850e09d: downsample_factor 1). The mixed-channel configs' sample_size 128
# is a diffusers field that the supervised forward never reads.
TRAIN_GRID = {"pdet-mc": 256, "pdet-sc": 256}


def contract(architecture: str) -> opzoo.DataContract:
    """What a PDE-Transformer of ``architecture`` takes from a user's file (docs/data-contract.md)."""
    mixed = architecture == "pdet-mc"
    return opzoo.DataContract(
        name=architecture,
        fields=None,
        units="each dataset's own, standardized per dataset",
        pad_value=0.0 if mixed else None,
        pad_source=f"as its data pipeline pads a PDE's missing channels ({at('pdetransformer/data/multi_module.py', HEAD)})"
        if mixed else "",
        other_fields="pad" if mixed else "any",
        other_fields_source="more adapt the patch embedding and final layer when fine-tuning" if mixed else
                            "each channel is a token of its own: no tensor depends on the channel count",
        rollout_note="its predictions of them are zeroed, as pdetransformer's rollout zeroes them (Fields > 0, "
                     f"{at('pdetransformer/core/mixed_channels/train_supervised.py', '850e09d')}); the fill value "
                     "is what is fed back" if mixed else "",
        grid="any grid that suits its patches and windows (no resolution-bound embedding); trained at 256x256",
        resample="bilinear",
        resample_source="to the nearest grid it runs at (opzoo's)",
        boundary="periodic shifted windows (periodic=True, as pretrained; kept in evaluation) or walls "
                 "(periodic=False): fine-tuning follows what the files state",
        spatial_dims=(2,),
        normalization=opzoo.Normalization(
            "training-split",
            "each channel standardized by its statistics over the training split inside the model, as its data "
            "pipeline standardized each dataset by its own mean and std (normalize_data: mean-std)",
            source=at("config/ape_2d/data/multi_task_norm.yaml") + "; "
            + at("pdetransformer/data/pbdl_dataloader/normalization.py"),
            breaks="a file whose training split does not represent its test trajectories",
            config=("mean", "std"), by_config={"none": "none"},
            alternatives={"none": "the network sees the fields as given (normalization='none'): standardize them as "
                                  "its pretraining data were"}),
    )


def pretrained_cfg(architecture: str = "pdet-mc", published: bool = True) -> dict[str, Any]:
    """The facts of a published checkpoint of ``architecture``; ``published=False`` (another checkpoint, converted):
    its training grid is unknown and not recorded (config.json's sample_size is not it)."""
    sample_size = TRAIN_GRID[architecture] if published else None
    mixed = architecture == "pdet-mc"
    config = f"config/ape_2d/supervised/pde-{'mc' if mixed else 'sc'}-s-mse.yaml"
    labels = ("task_id is the PDE's index in opzoo_pdet.TASKS (pdetransformer's all_pdes); None: no label" if mixed
              else "pde_type is the PDE's index in opzoo_pdet.TASKS and channel_types each channel's index in "
                   "opzoo_pdet.FIELDS (pdetransformer's all_pdes, all_fields); None: no label")
    return {
        **({"channels": 2} if mixed else {}), "in_timesteps": 1,
        **({"resolution": [sample_size, sample_size]} if isinstance(sample_size, int) else {}),
        "datasets": ["APE-2D (PBDL): 17 datasets of 10 PDEs, diffusion to Kolmogorov flow"],
        "normalization": "per-dataset mean/std of each field, by pdetransformer's data pipeline (mean-std)",
        "input_normalization": "fields standardized with their dataset's mean/std: normalization='zscore' does it "
                               "inside the model with mean/std, which opzoo's fit computes from a file's training "
                               "split; normalization='none' takes standardized fields",
        "tasks": labels,
        "finetune_lr": TRAIN_LR,
        "finetune_lr_source": "the pretraining lr (" + at(config) + ")",
    }


def card_fields(variant: opzoo.Variant) -> dict[str, Any]:
    """What a row fills into its family's card template (``model_cards/pdet-mc.md``, ``pdet-sc.md``)."""
    nrmse1, nrmse10 = variant["nrmse"]
    return {"size_word": variant["size_word"], "subfolder": variant["subfolder"],
            "published_params": variant["published_params"], "hidden": variant.args["hidden_size"],
            "heads": variant.args["num_heads"], "nrmse1": f"{nrmse1:.3f}", "nrmse10": f"{nrmse10:.2f}"}

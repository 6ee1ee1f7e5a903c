"""Where each fact about the gphyt-* presets comes from: FloWsnr/General-Physics-Transformer at a commit (fetched with
its history).

The rules here are functions of a row of the family's table (:class:`opzoo.Variant`, in ``family.py``): its
``size``, ``file`` and ``megabytes``."""

from __future__ import annotations

from typing import Any

import opzoo

REPO = "FloWsnr/General-Physics-Transformer"
WEIGHTS_COMMIT = "4374116"  # 2025-10-08 "Add weights link to README": the code that published the weights
RESTRUCTURED = "c40702d"  # 2026-02-07 "Restructure to ML-Training-Suite architecture" (requires-python >= 3.13)
HUB_REPO = "flwi/Physics-Foundation-Model"
FIELDS = ["pressure", "density", "temperature", "velocity_x", "velocity_y"]
DATASETS = ["cylinder_sym_flow_water", "cylinder_pipe_flow_water", "object_periodic_flow_water",
            "object_sym_flow_water", "object_sym_flow_air", "heated_object_pipe_flow_air", "cooled_object_pipe_flow_air",
            "rayleigh_benard_obstacle", "twophase_flow", "rayleigh_benard", "shear_flow",
            "euler_multi_quadrants_periodicBC", "acoustic_scattering_inclusions"]
CITATION = "Florian Wiesner et al. Towards a Physics Foundation Model. arXiv:2509.13805, 2025 (README.md @ 4374116)"


def at(path: str, commit: str = WEIGHTS_COMMIT) -> str:
    return f"{REPO} {path} @ {commit}"


CONFIG = at("gphyt/run/scripts/config.yaml")
MODEL = at("gphyt/model/transformer/model.py")
PREPROCESS_COMMIT = "6324976"  # 2025-07-16: the last version of gphyt/data/preprocess.py (deleted in e687cce)
PREPROCESS = f"{REPO} gphyt/data/preprocess.py @ {PREPROCESS_COMMIT}"


def _training_set(name: str, *, swap: bool = False, buoyancy: bool = False, momentum: bool = False,
                  note: str = "") -> opzoo.TrainingSet:
    """A dataset as ``preprocess.py``'s ``settings[name]`` wrote its training files: ``swap`` (H and W swapped and the
    velocity components with them), ``conv_buoyancy`` (density := buoyancy), ``conv_momentum`` (velocity := momentum
    / density); every other field by its name, a missing one all zero (``add_missing_datasets``)."""
    fields = {}
    if swap:
        fields |= {"velocity_x": "velocity_y", "velocity_y": "velocity_x"}
    if buoyancy:
        fields["density"] = "buoyancy"
    if momentum:
        fields |= {"velocity_x": "momentum_x / density", "velocity_y": "momentum_y / density"}
    return opzoo.TrainingSet(name, fields, transpose=swap, source=f"{PREPROCESS} (settings[{name!r}])", note=note)


TRAINING_SETS = (
    _training_set("rayleigh_benard", buoyancy=True),
    _training_set("shear_flow", swap=True),
    _training_set("turbulent_radiative_layer_2D", swap=True),
    _training_set("euler_multi_quadrants_periodicBC", momentum=True,
                  note="upstream resampled momentum and density (bicubic) and then divided; opzoo divides at the "
                       "file's grid and resamples the velocity: the same where the file is at 256x128"),
    _training_set("euler_multi_quadrants_openBC", momentum=True,
                  note="not in the published runs' dataset list; the same map as periodicBC"),
    _training_set("acoustic_scattering_inclusions",
                  note="preprocess.py repeats a time-invariant 'density' over time (conv_density); The Well names "
                       "this dataset's field material_density, which opzoo does not read as density (unverified)"),
    *(_training_set(n) for n in ("cylinder_sym_flow_water", "cylinder_pipe_flow_water", "object_periodic_flow_water",
                                 "object_sym_flow_water", "object_sym_flow_air", "heated_object_pipe_flow_air",
                                 "cooled_object_pipe_flow_air", "rayleigh_benard_obstacle", "twophase_flow")),
)

CONTRACT = opzoo.DataContract(
    name="gphyt",
    fields=tuple(FIELDS),
    units="each dataset's own (The Well's and the authors' simulations), z-scored per dataset",
    training_sets=TRAINING_SETS,
    absent={f: 0.0 for f in FIELDS},
    absent_source=f"as upstream wrote its training files (add_missing_datasets: zeros; {PREPROCESS})",
    other_fields="adapt",
    other_fields_source="the patch (de)tokenizer's channels adapted: new input channels start at zero",
    rollout_note="the training files held the absent fields at zero",
    grid="256x128 (its position table); another grid is resampled to it, or the table interpolated when fine-tuning "
         "at --resolution H W",
    resample="bicubic",
    resample_source=f"as upstream's preprocess.py resampled every dataset to 256x128 (interpolate_data, bicubic, "
                    f"align_corners=False; {PREPROCESS})",
    boundary="what its training sets had (walls, inflow/outflow and periodic domains): no boundary input",
    spatial_dims=(2,),
    normalization=opzoo.Normalization(
        "training-split",
        "each field z-scored by its statistics over the training split ((x - mean) / (max(std, 1e-4) + 1e-6)), as "
        "upstream z-scored each dataset by its stats.yaml (use_normalization: true)",
        source=at("gphyt/data/well_dataset.py") + " (min_std 1e-4); " + at("gphyt/data/normalize.py")
        + " (compute_statistics: over the train files, population std); " + CONFIG,
        breaks="a file whose training split does not represent its test trajectories",
        config=("field_mean", "field_std"),
        by_config={"instance": "per-sample", "none": "none"},
        alternatives={"per-sample": "each sample's channels standardized over the input window ((x - mean) / (std + "
                                    "1e-6), unbiased std: upstream's other mode, not the published weights')",
                      "none": "the network sees the fields as given (normalization='none'): z-score them as "
                              "upstream did"},
        min_std=1e-4),
)


def facts(variant: opzoo.Variant) -> tuple[opzoo.Fact, ...]:
    Fact = opzoo.Fact
    a = variant.args
    return (
        Fact("Hub repo", f"{HUB_REPO}, file {variant['file']}", at("README.md") + " (the weights link, added in "
             "4374116); the file names per size are the issue's lead, the Hub listing could not be read here",
             verified=False, alternatives=("another file name: the load fails offline naming the file to fetch",)),
        Fact("Hub revision", "not pinned: the Hub repo's commits could not be read here, so a load takes main; the "
             "load check reads the file's recorded config and every tensor", f"huggingface.co/{HUB_REPO} (not "
             "reachable offline)", verified=False,
             alternatives=("weights replaced on main since: the config and tensor checks refuse another network",)),
        Fact("code that trained the weights", f"the code at {WEIGHTS_COMMIT} (2025-10-08), which published them "
             f"(its pyproject.toml: requires-python >= 3.12); the code was restructured at {RESTRUCTURED} "
             f"(2026-02-07), from which on it requires Python >= 3.13 (the head df1527c too)",
             at("README.md") + " (git log); " + at("pyproject.toml") + f"; {REPO} pyproject.toml @ {RESTRUCTURED} "
             "and @ df1527c"),
        Fact("weights file", "torch.save of {samples_trained, batches_trained, cycle_idx, model_state_dict, "
             "optimizer_state_dict, config, ...}, names prefixed by 'module.' (DDP) and '_orig_mod.' (torch.compile) "
             "where trained so; upstream unpickles it in full (weights_only off), opzoo with weights_only=True and only "
             "pathlib's path classes allowed, as upstream allow-lists them",
             at("gphyt/run/train.py") + " (Trainer.save_checkpoint); " + at("gphyt/run/run_utils.py")
             + " (load_stored_model)"),
        Fact("file size", f"~{variant['megabytes']} MB is {variant['params'] * 4 / 1e6:.0f} MB of float32 "
             f"parameters for this network: the file holds the weights alone (no optimizer state), and the linear "
             "tokenizer, absolute positions and derivative channels of the training config fit its size",
             "the issue's file sizes (the Hub listing could not be read here); " + MODEL, verified=False),
        Fact("architecture", f"GPhyT {variant['size']}: hidden {a['hidden_dim']}, MLP {a['mlp_dim']}, "
             f"{a['num_heads']} heads, {a['num_layers']} blocks; patches 1x16x16 of 4 frames at 256x128; absolute "
             "positions; full spatio-temporal attention; linear tokenizer and detokenizer without overlap; "
             "2nd-order central differences in t, h, w as extra channels",
             at("gphyt/model/model_specs.py") + " (GPT_S/M/L/XL); " + CONFIG + " (model: pos_enc_mode absolute, "
             "patch_size [1, 16, 16], use_derivatives true, tokenizer linear, overlap 0)"),
        Fact("integrator and step", "one explicit Euler step x + dt f(x) (integrator Euler in the training config; "
             "Heun, RK4 and none also implemented); dt is 1: the model's forward takes a step_size but never passes "
             "it to the integrator, so every published prediction used 1.0 (opzoo's step_size, default 1.0)",
             MODEL + " (PhysicsTransformer.forward); " + at("gphyt/model/transformer/num_integration.py")),
        Fact("input fields", "5 channels in this order: pressure, density, temperature (t0 fields), velocity x, y "
             "(t1); 4 input frames, frame stride dt_stride drawn from [1, 8] in training",
             at("gphyt/data/dataset_utils.py") + " (include_field_names); " + CONFIG + " (n_steps_input 4, "
             "dt_stride [1, 8])"),
        Fact("normalization", "each field z-scored by its dataset's stats.yaml mean and std ((x - mean) / (max(std, "
             "1e-4) + 1e-6)) by the data pipeline (use_normalization: true); opzoo's normalization='stats' does it "
             "inside the model with field_mean/field_std, which opzoo's fit computes from a file's training split as "
             "upstream's compute_statistics did over its train files (the published runs' recorded config is read by "
             "the load check)", at("gphyt/data/well_dataset.py") + " (min_std, _reconstruct_fields); "
             + at("gphyt/data/normalize.py") + " (compute_statistics); " + CONFIG + " (use_normalization: true)"),
        Fact("missing fields", "a dataset without one of the five fields has it all zero (upstream's preprocess.py "
             "wrote zeros: add_missing_datasets); opzoo reads a field the file lacks as 0.0 and says so",
             PREPROCESS + " (add_missing_datasets); " + at("tests/test_data/test_ind_datasets.py")
             + " (test_shear_flow_dataset)"),
        Fact("training files", "upstream rewrote each dataset before training: every field resampled to 256x128 "
             "(bicubic), shear_flow and turbulent_radiative_layer_2D transposed (velocity components swapped), "
             "rayleigh_benard's buoyancy as density, euler_multi_quadrants' velocity as momentum / density; opzoo "
             "reads a file of one of them the same way (docs/data-contract.md)", PREPROCESS + " (settings, "
             "process_hdf5; deleted in e687cce)"),
        Fact("native grid", "256 x 128 (H x W), the position table's grid; other grids are resampled by opzoo's "
             "data pipeline (and said), or the table is interpolated when fine-tuning at another grid",
             CONFIG + " (out_shape [256, 128]); " + MODEL + " (AbsPositionalEmbedding)"),
        Fact("training data", ", ".join(DATASETS) + " (the datasets the training config lists)", CONFIG),
        Fact("training", "AdamW lr 1e-4, weight decay 0.01, linear warm-up then cosine, batch 64 per GPU, bf16 "
             "autocast (amp), torch.compile, MSE on the next frame", CONFIG + "; " + at("gphyt/run/train.py")
             + " (torch.autocast dtype=torch.bfloat16)"),
        Fact("code license", "MIT", at("LICENSE")),
        Fact("weights license", "not stated", f"the Hub card of {HUB_REPO} could not be read here", verified=False,
             alternatives=("a license on the Hub card: check it before redistributing",)),
    )


def pretrained_cfg(preset: str | None) -> dict[str, Any]:
    """The facts of a published checkpoint (``preset``), or of another GPhyT file (None)."""
    cfg: dict[str, Any] = {"channels": 5, "in_timesteps": 4, "resolution": [256, 128], "finetune_lr": 1e-4,
                           "finetune_lr_source": "the pretraining lr (" + CONFIG + ")"}
    if preset is None:
        return cfg
    return {**cfg, "fields": list(FIELDS), "datasets": list(DATASETS),
            "normalization": "each field z-scored by its dataset's stats.yaml, by the data pipeline; opzoo: by the "
                             "statistics of the training split of a user's file, inside the model",
            "license": "MIT (code); weights: not stated"}


def card_fields(variant: opzoo.Variant) -> dict[str, Any]:
    a = variant.args
    return {"size": variant["size"], "file": variant["file"], "hidden": a["hidden_dim"], "mlp": a["mlp_dim"],
            "heads": a["num_heads"], "layers": a["num_layers"], "megabytes": variant["megabytes"]}

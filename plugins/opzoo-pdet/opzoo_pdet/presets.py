"""The ``pdet-mc-*`` presets: PDE-Transformer's published mixed-channel checkpoints by name, converted on load from the
Hub's diffusers layout, after checking that the subfolder's ``config.json`` is the network the preset builds."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import opzoo

from .backbones import DEPTH, SIZES, PdetMixedConfig
from .converter import CONFIG_FILE, TABLES, WEIGHTS_FILE, architecture_of, model_args, read_config
from .provenance import HUB_REPO, at, mixed_facts, reported_result, separate_facts
from .separate_backbone import PdetSeparateConfig

MIXED = {"pdet-mc-s": ("mc-s", "PDE-S"), "pdet-mc-b": ("mc-b", "PDE-B"), "pdet-mc-l": ("mc-l", "PDE-L")}
SEPARATE = {"pdet-sc-s": ("sc-s", "PDE-S"), "pdet-sc-b": ("sc-b", "PDE-B"), "pdet-sc-l": ("sc-l", "PDE-L")}
CONFIGS = {"pdet-mc": PdetMixedConfig, "pdet-sc": PdetSeparateConfig}
CARDS = files("opzoo_pdet") / "model_cards"
TRAIN_LR = 4e-5  # config/ape_2d/supervised/pde-{mc,sc}-*-mse.yaml trainer.base_learning_rate
# Both were trained at 256x256: their APE-2D files are simulated at 2048x2048 and stored average-pooled to 256x256
# (pdetransformer/data/simulations_apebench/simulation.py @ 850e09d, low_res; docs/datasets/ape_2d.md @ 850e09d, "For
# training/inference we downsample the spatial resolution to 256x256"), and their data module reads them as stored
# (config/ape_2d/data/multi_task_norm.yaml @ 850e09d: downsample_factor 1). The mixed-channel configs' sample_size 128
# is a diffusers field that the supervised forward never reads.
TRAIN_GRID = {"pdet-mc": 256, "pdet-sc": 256}


def preset_args(size: str) -> dict[str, Any]:
    return {**SIZES[size], "depth": list(DEPTH), "in_channels": 2, "out_channels": 2, "periodic": True}


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
        "input_normalization": "fields standardized with their dataset's mean/std (normalization='zscore' with "
                               "mean/std does it inside the model; the default 'none' takes standardized fields)",
        "tasks": labels,
        "finetune_lr": TRAIN_LR,
        "finetune_lr_source": "the pretraining lr (" + at(config) + ")",
    }


def matching_preset(architecture: str, args: dict[str, Any]) -> str | None:
    """The preset whose network ``args`` builds, if any (labels and normalization aside)."""
    config = CONFIGS[architecture]
    want = config.from_dict(args, source="converted checkpoint")
    for name, (_, size) in (MIXED if architecture == "pdet-mc" else SEPARATE).items():
        if config.from_dict(preset_args(size), source=name) == want:
            return name
    return None


NETWORK = {"pdet-mc": "mixed-channel", "pdet-sc": "separate-channel"}


def config_agrees(subfolder: str, architecture: str = "pdet-mc"):
    """The load check: the subfolder's config.json builds the preset's network (of ``architecture``)."""

    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        path = artifacts.files.get(f"{subfolder}/{CONFIG_FILE}")
        if path is None:
            raise opzoo.CheckFailed(f"{subfolder}/{CONFIG_FILE} was not fetched")
        doc = read_config(path)
        theirs = architecture_of(doc)
        if theirs != architecture:
            table = MIXED if theirs == "pdet-mc" else SEPARATE
            names = [n for n, (_, size) in table.items() if size == doc.get("type")] or list(table)
            raise opzoo.CheckFailed(f"{path} is a {NETWORK[theirs]} PDE-Transformer checkpoint, not the "
                                    f"{NETWORK[architecture]} network this preset builds: load it with "
                                    f"{' or '.join(names)}")
        sd = {"model." + k[4:]: v for k, v in artifacts.state_dict.items()}
        weights = artifacts.files.get(f"{subfolder}/{WEIGHTS_FILE}")
        if weights is not None:  # the position tables the converter dropped (they say the window size)
            from safetensors import safe_open

            with safe_open(str(weights), "pt") as f:
                sd |= {k: f.get_tensor(k) for k in f.keys() if k.endswith(TABLES)}
        try:
            args = model_args(doc, sd, path)
        except opzoo.CheckpointError as e:
            raise opzoo.CheckFailed(str(e)) from None
        c = artifacts.model_config
        mismatched = {k: (v, getattr(c, k)) for k, v in args.items() if getattr(c, k) != v}
        if mismatched:
            detail = ", ".join(f"{k}: config.json {a!r}, model {b!r}" for k, (a, b) in mismatched.items())
            raise opzoo.CheckFailed(f"{path} describes another network ({detail}); load it with "
                                    f"opzoo.load(..., {', '.join(f'{k}={a!r}' for k, (a, _) in mismatched.items())}) "
                                    "if that is what you want")
        return f"{subfolder}/{CONFIG_FILE} and the tensors build this network ({', '.join(f'{k}={v}' for k, v in args.items())})"

    return opzoo.PretrainedCheck(f"{subfolder}/config.json agrees with the preset", run)


def register_presets(registry) -> None:
    for backbone, table, facts in (("pdet-mc", MIXED, mixed_facts), ("pdet-sc", SEPARATE, separate_facts)):
        for name, (subfolder, size) in table.items():
            registry.register_model(
                name, backbone=backbone, args=preset_args(size),
                pretrained=opzoo.PretrainedSource(HUB_REPO, f"{subfolder}/{WEIGHTS_FILE}", converter="pde-transformer",
                                                  extra_files=(f"{subfolder}/{CONFIG_FILE}",),
                                                  checks=(config_agrees(subfolder, backbone),)),
                card=CARDS / f"{name}.md", pretrained_cfg=pretrained_cfg(backbone), provenance=facts(subfolder, size),
                results=(reported_result(subfolder),),
            )


__all__ = ["MIXED", "SEPARATE", "preset_args", "pretrained_cfg", "register_presets"]

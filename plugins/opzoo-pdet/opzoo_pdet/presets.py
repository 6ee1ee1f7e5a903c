"""The ``pdet-mc-*`` presets: PDE-Transformer's published mixed-channel checkpoints by name, converted on load from the
Hub's diffusers layout, after checking that the subfolder's ``config.json`` is the network the preset builds."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import opzoo

from .backbones import DEPTH, SIZES, PdetMixedConfig
from .converter import CONFIG_FILE, WEIGHTS_FILE, model_args, read_config
from .provenance import HUB_REPO, TASKS, at, mixed_facts, reported_result

MIXED = {"pdet-mc-s": ("mc-s", "PDE-S"), "pdet-mc-b": ("mc-b", "PDE-B"), "pdet-mc-l": ("mc-l", "PDE-L")}
CARDS = files("opzoo_pdet") / "model_cards"
TRAIN_LR = 4e-5  # config/ape_2d/supervised/pde-mc-*-mse.yaml trainer.base_learning_rate
TRAIN_GRID = 128  # their sample_size


def preset_args(size: str) -> dict[str, Any]:
    return {**SIZES[size], "depth": list(DEPTH), "in_channels": 2, "out_channels": 2, "periodic": True}


def pretrained_cfg(sample_size: int | None = TRAIN_GRID) -> dict[str, Any]:
    return {
        "channels": 2, "in_timesteps": 1,
        **({"resolution": [sample_size, sample_size]} if isinstance(sample_size, int) else {}),
        "datasets": ["APE-2D (PBDL): 17 PDEs, diffusion to Kolmogorov flow"],
        "normalization": "per-dataset mean/std of each field, by pdetransformer's data pipeline (mean-std)",
        "input_normalization": "fields standardized with their dataset's mean/std (normalization='zscore' with "
                               "mean/std does it inside the model; the default 'none' takes standardized fields)",
        "tasks": "task_id is the PDE's index in opzoo_pdet.TASKS (pdetransformer's all_pdes); None: no label",
        "finetune_lr": TRAIN_LR,
        "finetune_lr_source": "the pretraining lr (" + at("config/ape_2d/supervised/pde-mc-s-mse.yaml") + ")",
    }


def matching_preset(args: dict[str, Any]) -> str | None:
    """The preset whose network ``args`` builds, if any (task and normalization aside)."""
    want = PdetMixedConfig.from_dict(args, source="converted checkpoint")
    for name, (_, size) in MIXED.items():
        if PdetMixedConfig.from_dict(preset_args(size), source=name) == want:
            return name
    return None


def config_agrees(subfolder: str):
    """The load check: the subfolder's config.json builds the preset's network."""

    def run(artifacts: opzoo.PretrainedArtifacts) -> str:
        path = artifacts.files.get(f"{subfolder}/{CONFIG_FILE}")
        if path is None:
            raise opzoo.CheckFailed(f"{subfolder}/{CONFIG_FILE} was not fetched")
        try:
            args = model_args(read_config(path), {"model." + k[4:]: v for k, v in artifacts.state_dict.items()}, path)
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
    for name, (subfolder, size) in MIXED.items():
        registry.register_model(
            name, backbone="pdet-mc", args=preset_args(size),
            pretrained=opzoo.PretrainedSource(HUB_REPO, f"{subfolder}/{WEIGHTS_FILE}", converter="pde-transformer",
                                              extra_files=(f"{subfolder}/{CONFIG_FILE}",),
                                              checks=(config_agrees(subfolder),)),
            card=CARDS / f"{name}.md", pretrained_cfg=pretrained_cfg(), provenance=mixed_facts(subfolder, size),
            results=(reported_result(subfolder),),
        )


__all__ = ["MIXED", "TASKS", "preset_args", "pretrained_cfg", "register_presets"]

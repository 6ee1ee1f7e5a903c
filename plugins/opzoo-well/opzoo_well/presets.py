"""The ``well-*`` presets: every checkpoint The Well publishes, by name (DESIGN §6.8).

Sources (PolymathicAI/the_well): the model READMEs ``the_well/benchmark/models/{fno,tfno,unet_classic,
unet_convnext}/README.md`` (checkpoint list, Hub links, learning rate, epochs, test VRMSE; "the context
length was set to 4"), the model configs ``the_well/benchmark/configs/model/{fno,tfno,unet_classic,
unet_convnext}.yaml`` (FNO/TFNO ``modes1: 16, modes2: 16, hidden_channels: 128``; UNetClassic
``init_features: 48``; UNetConvNext ``blocks_per_stage: 2, init_features: 42``; everything else at the
class defaults) and ``the_well/benchmark/train.py`` (``dim_in = n_steps_input * n_fields +
n_constant_fields``, ``dim_out = n_fields``, ``n_spatial_dims`` and ``spatial_resolution`` from the
dataset). Normalization: the benchmark data configs set ``use_normalization: True``, for which
``WellDataModule`` uses ``ZScoreNormalization`` and trains on ``WellDataset`` (a full next-step
target, not deltas).
"""

from __future__ import annotations

import dataclasses
from importlib.resources import files
from typing import Any

import opzoo

from .checks import CONFIG_FILE, checks_for
from .datasets import DATASETS, STATS_SOURCE, dataset, normalization_args
from .provenance import preset_facts, reported_result

CARDS = files("opzoo_well") / "model_cards"
N_STEPS_INPUT = 4  # scripts/huggingface/MODEL_CARD_TEMPLATE.md @ 671f66c: "the context length was set to 4"


@dataclasses.dataclass(frozen=True)
class Architecture:
    key: str  # opzoo preset infix and backbone suffix
    well_class: str  # the_well.benchmark.models.<well_class>
    args: dict[str, Any]  # The Well's model config (configs/model/*.yaml)
    paper: str


ARCHITECTURES = {a.key: a for a in (
    Architecture("fno", "FNO", {"modes1": 16, "modes2": 16, "hidden_channels": 128},
                 "Li et al., Fourier Neural Operator for Parametric PDEs, ICLR 2021 (arXiv:2010.08895)"),
    Architecture("tfno", "TFNO", {"modes1": 16, "modes2": 16, "hidden_channels": 128},
                 "Kossaifi et al., Multi-Grid Tensorized Fourier Neural Operator, TMLR 2024 (arXiv:2310.00120)"),
    Architecture("unet-classic", "UNetClassic", {"init_features": 48},
                 "Ronneberger et al., U-Net, MICCAI 2015 (arXiv:1505.04597)"),
    Architecture("unet-convnext", "UNetConvNext", {"blocks_per_stage": 2, "init_features": 42},
                 "Liu et al., A ConvNet for the 2020s, CVPR 2022 (arXiv:2201.03545)"),
)}

# dataset -> (learning rate, epochs, test VRMSE) as the model READMEs list them; datasets a README lists
# without results ("-") have no checkpoint and no preset.
REPORTED = {
    "fno": {
        "acoustic_scattering_maze": ("1E-3", 27, "0.5033"), "active_matter": ("5E-3", 239, "0.3157"),
        "convective_envelope_rsg": ("1E-4", 14, "0.0224"), "gray_scott_reaction_diffusion": ("1E-3", 46, "0.2044"),
        "helmholtz_staircase": ("5E-4", 132, "0.00160"), "MHD_64": ("5E-3", 170, "0.3352"),
        "planetswe": ("5E-4", 49, "0.0855"), "post_neutron_star_merger": ("5E-4", 104, "0.4144"),
        "rayleigh_benard": ("1E-4", 32, "0.6049"), "rayleigh_taylor_instability": ("5E-3", 177, "0.4013"),
        "shear_flow": ("1E-3", 24, "0.4450"), "supernova_explosion_64": ("1E-4", 40, "0.3804"),
        "turbulence_gravity_cooling": ("1E-4", 13, "0.2381"), "turbulent_radiative_layer_2D": ("5E-3", 500, "0.4906"),
        "viscoelastic_instability": ("5E-3", 205, "0.7195"),
    },
    "tfno": {
        "acoustic_scattering_maze": ("1E-3", 27, "0.5034"), "active_matter": ("1E-3", 243, "0.3342"),
        "convective_envelope_rsg": ("1E-3", 13, "0.0195"), "gray_scott_reaction_diffusion": ("5E-3", 45, "0.1784"),
        "helmholtz_staircase": ("5E-4", 131, "0.00031"), "MHD_64": ("1E-3", 155, "0.3347"),
        "planetswe": ("5E-4", 49, "0.1061"), "post_neutron_star_merger": ("5E-4", 99, "0.4064"),
        "rayleigh_benard": ("1E-4", 31, "0.8568"), "rayleigh_taylor_instability": ("1E-4", 175, "0.2251"),
        "shear_flow": ("1E-3", 24, "0.3626"), "supernova_explosion_64": ("1E-4", 35, "0.3645"),
        "turbulence_gravity_cooling": ("5E-4", 10, "0.2789"), "turbulent_radiative_layer_2D": ("1E-3", 500, "0.4938"),
        "viscoelastic_instability": ("5E-3", 199, "0.7021"),
    },
    "unet-classic": {
        "acoustic_scattering_maze": ("1E-2", 26, "0.0395"), "active_matter": ("5E-3", 239, "0.2609"),
        "convective_envelope_rsg": ("5E-4", 19, "0.0701"), "gray_scott_reaction_diffusion": ("1E-2", 44, "0.5870"),
        "helmholtz_staircase": ("1E-3", 120, "0.01655"), "MHD_64": ("5E-4", 165, "0.1988"),
        "planetswe": ("1E-2", 49, "0.3498"), "rayleigh_benard": ("1E-4", 29, "0.8448"),
        "rayleigh_taylor_instability": ("5E-4", 193, "0.6140"), "shear_flow": ("5E-4", 29, "0.836"),
        "supernova_explosion_64": ("5E-4", 46, "0.3242"), "turbulence_gravity_cooling": ("1E-3", 14, "0.3152"),
        "turbulent_radiative_layer_2D": ("5E-3", 500, "0.2394"), "viscoelastic_instability": ("5E-4", 198, "0.3147"),
    },
    "unet-convnext": {
        "acoustic_scattering_maze": ("1E-3", 10, "0.0196"), "active_matter": ("5E-3", 156, "0.0953"),
        "convective_envelope_rsg": ("1E-4", 5, "0.0663"), "gray_scott_reaction_diffusion": ("1E-4", 15, "0.3596"),
        "helmholtz_staircase": ("5E-4", 47, "0.00146"), "MHD_64": ("5E-3", 59, "0.1487"),
        "planetswe": ("1E-2", 18, "0.3268"), "rayleigh_benard": ("5E-4", 12, "0.4807"),
        "rayleigh_taylor_instability": ("5E-3", 56, "0.3771"), "shear_flow": ("5E-4", 9, "0.3972"),
        "supernova_explosion_64": ("5E-4", 13, "0.2801"), "turbulence_gravity_cooling": ("1E-3", 3, "0.2093"),
        "turbulent_radiative_layer_2D": ("5E-3", 495, "0.1247"), "viscoelastic_instability": ("5E-4", 114, "0.1966"),
    },
}

# The published FNO and TFNO weights were trained with the Fourier blocks' output dropped (fno_net's docstring);
# their presets compute that function (provenance.py has the sources; checks.py tests it on the real weights).
AS_TRAINED = {"fno": {"fourier_blocks": "dropped"}, "tfno": {"fourier_blocks": "dropped"}}
# The Well's test batch size per dataset (the_well/benchmark/configs/data/<dataset>.yaml @ v1.1.0, d5ea89f):
# its test score is a mean of batch means, so `opzoo eval --windows all` uses it to score the same way
TEST_BATCH_SIZE = {
    "acoustic_scattering_maze": 64, "active_matter": 64, "convective_envelope_rsg": 1, "gray_scott_reaction_diffusion": 256,
    "helmholtz_staircase": 24, "MHD_64": 2, "planetswe": 32, "post_neutron_star_merger": 1, "rayleigh_benard": 64,
    "rayleigh_taylor_instability": 2, "shear_flow": 32, "supernova_explosion_64": 2, "turbulence_gravity_cooling": 2,
    "turbulent_radiative_layer_2D": 64, "viscoelastic_instability": 32,
}
TEST_PROTOCOL = ("The Well's test score (the_well/benchmark/trainer/training.py @ v1.1.0: Trainer.validation_loop "
                 "with full=True over the test split's files: every window of 4 input steps and the next one, "
                 "one-step VRMSE per field, averaged per batch and then over batches)")
WEIGHTS_FILE = "model.safetensors"  # written by huggingface_hub's PyTorchModelHubMixin.save_pretrained


def preset_name(arch: str, dataset_name: str) -> str:
    return f"well-{arch}-{dataset_name}"


def hub_repo(arch: str, dataset_name: str) -> str:
    """The Hub repo of a checkpoint, by The Well's upload rule (``scripts/huggingface/upload_model.py``:
    ``polymathic-ai/{model.__class__.__name__}-{dataset_name}``)."""
    return f"polymathic-ai/{ARCHITECTURES[arch].well_class}-{dataset_name}"


def backbone_name(arch: str) -> str:
    return f"well-{arch}"


def model_args(arch: str, dataset_name: str, in_timesteps: int = N_STEPS_INPUT,
               arch_args: dict[str, Any] | None = None, resolution: list[int] | None = None) -> dict[str, Any]:
    """The opzoo config of ``arch`` trained on ``dataset_name`` (The Well's init args + data facts);
    ``resolution`` the grid the weights were trained on, when it is not the dataset's current one."""
    d = dataset(dataset_name)
    n = len(d.channels) + len(d.constant_channels)
    return {
        "in_channels": n, "out_channels": n, "in_timesteps": in_timesteps, "out_timesteps": 1,
        "fields": d.channels, "constant_fields": d.constant_channels,
        "spatial_dims": d.n_spatial_dims, "resolution": list(resolution or d.resolution),
        "normalization": "zscore", "target": "full", **normalization_args(dataset_name),
        **(ARCHITECTURES[arch].args | AS_TRAINED.get(arch, {}) if arch_args is None else arch_args),
    }


def pretrained_cfg(arch: str, dataset_name: str, in_timesteps: int = N_STEPS_INPUT,
                   resolution: list[int] | None = None) -> dict[str, Any]:
    d = dataset(dataset_name)
    return {
        "channels": len(d.channels) + len(d.constant_channels),
        "fields": d.channels + d.constant_channels,
        "time_varying_fields": d.channels,
        "constant_fields": d.constant_channels,
        "resolution": list(resolution or d.resolution),
        "in_timesteps": in_timesteps,
        "dataset": f"The Well: {dataset_name}",
        "normalization": ("z-score per channel with the dataset's stats.yaml (The Well's ZScoreNormalization, "
                          f"stds clipped at 1e-4), inside the model; stats from {STATS_SOURCE.format(name=dataset_name)}"),
        "target": "full next step (The Well's WellDataset; the model returns physical fields)",
        "input_format": "The Well's DefaultChannelsFirstFormatter: time folded into channels (t outer), "
                        "constant fields appended, nan_to_num",
        "source": f"hf-hub:{hub_repo(arch, dataset_name)} (The Well, PolymathicAI/the_well)",
        "test_protocol": TEST_PROTOCOL, "test_batch_size": TEST_BATCH_SIZE[dataset_name],
        **_finetune_lr(arch, dataset_name),
    }


def _finetune_lr(arch: str, dataset_name: str) -> dict[str, Any]:
    """The lr The Well trained this checkpoint with (the best of five on validation, its README's table),
    as the recommended fine-tuning lr."""
    reported = REPORTED.get(arch, {}).get(dataset_name)
    if reported is None:
        return {}
    return {"finetune_lr": float(reported[0]),
            "finetune_lr_source": "The Well's README: the lr this checkpoint was trained with (best of five on validation)"}


def checkpoints() -> list[tuple[str, str]]:
    """Every published ``(arch, dataset)`` pair."""
    return [(arch, ds) for arch, table in REPORTED.items() for ds in table]


def register_presets(registry) -> None:
    for arch, ds in checkpoints():
        if ds not in DATASETS:
            raise opzoo.ConfigError(f"no layout for The Well dataset {ds!r}")
        name = preset_name(arch, ds)
        registry.register_model(
            name,
            backbone=backbone_name(arch),
            args=model_args(arch, ds),
            pretrained=opzoo.PretrainedSource(hub_repo(arch, ds), WEIGHTS_FILE, converter="the-well",
                                              converter_options={"dataset": ds, **AS_TRAINED.get(arch, {})},
                                              extra_files=(CONFIG_FILE,), checks=checks_for(arch)),
            card=CARDS / f"{name}.md",
            pretrained_cfg=pretrained_cfg(arch, ds),
            provenance=preset_facts(arch, ds),
            results=(reported_result(arch, ds),),
        )

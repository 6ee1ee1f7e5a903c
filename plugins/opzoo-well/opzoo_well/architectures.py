"""The Well's four benchmark architectures and the rules that name, locate and configure a checkpoint of one
(``families.py`` holds the table of published checkpoints, ``architectures`` what every row shares).

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
from typing import Any

from .datasets import STATS_SOURCE, TEST_BATCH_SIZE, dataset, normalization_args

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

# The published FNO and TFNO weights were trained with the Fourier blocks' output dropped (fno_net's docstring);
# their presets compute that function (provenance.py has the sources; checks.py tests it on the real weights).
AS_TRAINED = {"fno": {"fourier_blocks": "dropped"}, "tfno": {"fourier_blocks": "dropped"}}
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
                   resolution: list[int] | None = None, trained_lr: str | None = None) -> dict[str, Any]:
    """The facts of ``arch`` trained on ``dataset_name``; ``trained_lr``: the lr The Well trained it with (its
    README's table, for a published checkpoint), recommended for fine-tuning."""
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
        **({} if trained_lr is None else {
            "finetune_lr": float(trained_lr),
            "finetune_lr_source": "The Well's README: the lr this checkpoint was trained with (best of five on "
                                  "validation)"}),
    }

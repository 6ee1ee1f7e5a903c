"""The ``the-well`` checkpoint converter: a repo of The Well's baselines -> opzoo ``well-*`` weights.

A repo ``polymathic-ai/<Model>-<dataset>`` (or a directory laid out like one) holds ``config.json``,
the model's init arguments (``dim_in``, ``dim_out``, ``n_spatial_dims``, ``spatial_resolution`` and
the architecture's own, e.g. ``modes1``, ``hidden_channels``, ``init_features``), and
``model.safetensors``, both written by huggingface_hub's ``PyTorchModelHubMixin``. The architecture
is read from the state dict's names; the data set is not recorded in the repo, so it is an argument
(``--dataset``), checked against ``dim_in``/``dim_out``/``n_spatial_dims``. The input steps are
``(dim_in - n_constant_fields) / n_fields``; the grid is config.json's ``spatial_resolution`` (the grid the
weights were trained on), else the dataset's.

An FNO or TFNO checkpoint does not say which code trained it, and the two compute different functions
(``fno_net``'s docstring), so ``fourier_blocks`` is required for them: ``"dropped"`` for weights trained
by the_well <= 1.1.0 (the published ones), ``"applied"`` for weights trained from commit 21e51f6 on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

import opzoo

from .architectures import ARCHITECTURES, backbone_name, model_args, preset_name, pretrained_cfg
from .cards import card_text
from .datasets import DATASETS, dataset

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
MAX_GRID = 1 << 15
SPECTRAL = re.compile(r"^model\.fno_blocks\.convs\.weight\.(\d+)\.(tensor|core|factors\.factor_(\d+))$")
FNO_RENAMES = (
    (re.compile(r"^model\.lifting\.(fcs\.\d+\.(weight|bias))$"), r"net.lifting.\1"),
    (re.compile(r"^model\.projection\.(fcs\.\d+\.(weight|bias))$"), r"net.projection.\1"),
    (re.compile(r"^model\.fno_blocks\.fno_skips\.(\d+)\.weight$"), r"net.skips.\1.weight"),
)
ARCH_ARG_NAMES = {
    "fno": ("modes1", "modes2", "modes3", "hidden_channels"),
    "tfno": ("modes1", "modes2", "modes3", "hidden_channels"),
    "unet-classic": ("init_features",),
    "unet-convnext": ("stages", "blocks_per_stage", "blocks_at_neck", "init_features"),
}


def repo_files(path: Path) -> tuple[Path | None, Path]:
    """``(config.json or None, model.safetensors)`` of a repo directory or of a weights file in one."""
    if path.is_dir():
        config, weights = path / CONFIG_FILE, path / WEIGHTS_FILE
        for f in (config, weights):
            if not f.is_file():
                raise opzoo.CheckpointError(f"{path} is not laid out like a Hub repo of The Well: {f.name} "
                                            + ("is not a regular file (a FIFO, device or directory)" if f.exists()
                                               else "is missing"))
        return config, weights
    if not path.is_file():
        raise opzoo.CheckpointError(f"{path}: " + ("not a regular file (a FIFO, device or directory)" if path.exists()
                                                   else "no such file or directory"))
    config = path.parent / CONFIG_FILE
    return (config if config.is_file() else None), path


def read_init_args(config: Path | None) -> dict[str, Any]:
    if config is None:
        return {}
    args = opzoo.read_json(config, "The Well's config.json", error=opzoo.CheckpointError)
    if not isinstance(args, dict):
        raise opzoo.CheckpointError(f"{config}: expected an object of init arguments, got {type(args).__name__}")
    return args


def read_state_dict(weights: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise opzoo.CheckpointError(f"{weights}: not a readable safetensors file ({e})") from None


def detect_architecture(sd: Mapping[str, torch.Tensor], where: Path) -> str:
    keys = set(sd)
    if "model.fno_blocks.convs.bias" in keys:
        return "tfno" if any(k.endswith(".core") for k in keys) else "fno"
    if "in_proj.weight" in keys and "neck.blocks.0.dwconv.weight" in keys:
        return "unet-convnext"
    if "encoder1.enc1conv1.weight" in keys:
        return "unet-classic"
    raise opzoo.CheckpointError(f"{where}: not a state dict of The Well's FNO, TFNO, UNetClassic or UNetConvNext "
                                f"(first keys: {', '.join(sorted(keys)[:5])})")


def map_state_dict(sd: Mapping[str, torch.Tensor], arch: str, where: Path) -> dict[str, torch.Tensor]:
    """The Well's names -> opzoo's (``net.`` prefix; FNO/TFNO spectral weights per layer)."""
    if arch.startswith("unet"):
        return {f"net.{k}": v for k, v in sd.items()}
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in sd.items():
        if key == "model.fno_blocks.convs.bias":  # [n_layers, C, 1, ...] -> one [C, 1, ...] per layer
            out.update({f"net.spectral.{i}.bias": value[i].clone() for i in range(value.shape[0])})
            continue
        m = SPECTRAL.match(key)
        if m:
            layer, kind, factor = m.groups()
            name = "weight" if kind == "tensor" else ("core" if kind == "core" else f"factors.{factor}")
            out[f"net.spectral.{layer}.{name}"] = value
            continue
        for pattern, repl in FNO_RENAMES:
            if pattern.match(key):
                out[pattern.sub(repl, key)] = value
                break
        else:
            unknown.append(key)
    if unknown:
        raise opzoo.CheckpointError(f"{where}: unexpected keys for The Well's {ARCHITECTURES[arch].well_class}: "
                                    f"{', '.join(sorted(unknown))}")
    return out


def infer_arch_args(arch: str, init: Mapping[str, Any], sd: Mapping[str, torch.Tensor], n_dims: int) -> dict[str, Any]:
    """The architecture's own init args: from config.json when given, else from the tensor shapes."""
    if init:
        return {k: init[k] for k in ARCH_ARG_NAMES[arch] if k in init}
    if arch in ("fno", "tfno"):
        key = "model.fno_blocks.convs.weight.0." + ("tensor" if arch == "fno" else "core")
        if arch == "fno":
            kept = list(sd[key].shape[2:-1])
        else:
            kept = [sd[f"model.fno_blocks.convs.weight.0.factors.factor_{k}"].shape[0] for k in range(2, 2 + n_dims)]
        modes = [*kept[:-1], 2 * (kept[-1] - 1)]  # the last axis keeps modes // 2 + 1 (even modes assumed)
        out = {f"modes{i + 1}": m for i, m in enumerate(modes)}
        out["hidden_channels"] = sd["model.fno_blocks.fno_skips.0.weight"].shape[0]
        return out
    if arch == "unet-classic":
        return {"init_features": sd["encoder1.enc1conv1.weight"].shape[0]}
    stages = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("encoder."))
    per_stage = 1 + max(int(k.split(".")[3]) for k in sd if k.startswith("encoder.0.blocks."))
    neck = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("neck.blocks."))
    return {"stages": stages, "blocks_per_stage": per_stage, "blocks_at_neck": neck,
            "init_features": sd["in_proj.weight"].shape[0]}


def io_channels(arch: str, sd: Mapping[str, torch.Tensor]) -> tuple[int, int]:
    """``(dim_in, dim_out)`` of a state dict."""
    first, last = {
        "fno": ("model.lifting.fcs.0.weight", "model.projection.fcs.1.weight"),
        "tfno": ("model.lifting.fcs.0.weight", "model.projection.fcs.1.weight"),
        "unet-classic": ("encoder1.enc1conv1.weight", "conv.weight"),
        "unet-convnext": ("in_proj.weight", "out_proj.weight"),
    }[arch]
    dim_out = sd[last].shape[1] if arch == "unet-classic" else sd[last].shape[0]  # ConvTranspose: [in, out, ...]
    return sd[first].shape[1], dim_out


def steps_and_check(name: str, dim_in: int, dim_out: int, n_dims: int | None, where: Path) -> int:
    """The number of input steps a checkpoint of dataset ``name`` with these sizes was trained with."""
    d = dataset(name)
    nv, nc = len(d.channels), len(d.constant_channels)
    if dim_out != nv:
        raise opzoo.CheckpointError(f"{where}: dim_out={dim_out}, but The Well's {name} has {nv} time-varying "
                                    f"channels ({', '.join(d.channels)}); is --dataset right?")
    if (dim_in - nc) % nv or dim_in <= nc:
        raise opzoo.CheckpointError(f"{where}: dim_in={dim_in} is not n_steps_input * {nv} + {nc} for {name}; "
                                    f"is --dataset right?")
    if n_dims is not None and n_dims != d.n_spatial_dims:
        raise opzoo.CheckpointError(f"{where}: n_spatial_dims={n_dims}, but {name} is {d.n_spatial_dims}D")
    return (dim_in - nc) // nv


def fno_blocks_option(arch: str, fourier_blocks: str | None, path: Path) -> dict[str, str]:
    """The ``fourier_blocks`` config field of an FNO/TFNO checkpoint (required), nothing for the U-Nets."""
    if arch not in ("fno", "tfno"):
        if fourier_blocks is not None:
            raise opzoo.CheckpointError(f"{path}: fourier_blocks applies to FNO and TFNO checkpoints; this one is "
                                        f"{ARCHITECTURES[arch].well_class}")
        return {}
    if fourier_blocks not in ("dropped", "applied"):
        raise opzoo.CheckpointError(
            f"{path}: a {ARCHITECTURES[arch].well_class} checkpoint of The Well computes one of two functions, "
            f"depending on the code that trained it, and the files do not say which: pass fourier_blocks=dropped for "
            f"weights trained by the_well <= 1.1.0 (the published checkpoints: the blocks' output was dropped), or "
            f"fourier_blocks=applied for weights trained from commit 21e51f6 (PyPI 1.2.0) on "
            f"(opzoo convert the-well DIR OUT --dataset NAME --option fourier_blocks=...)"
            + (f"; got {fourier_blocks!r}" if fourier_blocks is not None else ""))
    return {"fourier_blocks": fourier_blocks}


def trained_resolution(init: Mapping[str, Any], name: str, where: Path) -> list[int] | None:
    """config.json's ``spatial_resolution`` (the grid the weights were trained on), checked to be a grid."""
    res = init.get("spatial_resolution")
    if res is None:
        return None
    if not (isinstance(res, (list, tuple)) and all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in res)
            and len(res) == dataset(name).n_spatial_dims):
        raise opzoo.CheckpointError(f"{where}: spatial_resolution {res!r} is not a {dataset(name).n_spatial_dims}-D grid")
    if max(res) > MAX_GRID:  # The Well's grids are at most 1024 per axis: such a value is a damaged file
        raise opzoo.CheckpointError(f"{where}: spatial_resolution {res!r} is no grid a model of The Well was trained "
                                    f"on (more than {MAX_GRID} points per axis); the file is damaged")
    return list(res)


def convert_the_well(path, dataset: str | None = None, fourier_blocks: str | None = None) -> opzoo.ConvertedCheckpoint:
    """Registered as converter ``the-well``: a Hub repo directory of The Well (or its
    ``model.safetensors``, with ``config.json`` beside it if present) -> :class:`opzoo.ConvertedCheckpoint`.
    ``fourier_blocks`` (``"dropped"`` or ``"applied"``) is required for FNO and TFNO checkpoints."""
    path = Path(path)
    if dataset is None:
        raise opzoo.CheckpointError(f"{path}: the the-well converter needs the data set the checkpoint was trained on "
                                    f"(opzoo convert the-well DIR OUT --dataset NAME); one of {', '.join(DATASETS)}")
    config, weights = repo_files(path)
    init, sd = read_init_args(config), read_state_dict(weights)
    arch = detect_architecture(sd, weights)
    blocks = fno_blocks_option(arch, fourier_blocks, path)
    dim_in, dim_out = io_channels(arch, sd)
    for key, found in (("dim_in", dim_in), ("dim_out", dim_out)):
        if key in init and init[key] != found:
            raise opzoo.CheckpointError(f"{config}: {key}={init[key]} but the weights have {found}")
    n_dims = init.get("n_spatial_dims")
    steps = steps_and_check(dataset, dim_in, dim_out, n_dims, weights)
    resolution = trained_resolution(init, dataset, config)
    arch_args = infer_arch_args(arch, init, sd, n_dims or DATASETS[dataset].n_spatial_dims) | blocks
    args = model_args(arch, dataset, steps, arch_args, resolution)
    name = preset_name(arch, dataset)
    registry = opzoo.get_registry()
    config_class = registry.get("backbone", backbone_name(arch)).config_class
    same = registry.has_preset(name) and (config_class.from_dict(registry.preset(name).args, source=name)
                                          == config_class.from_dict(args, source=str(path)))
    preset = name if same else None
    # the lr The Well trained the published checkpoint with, from its family's table
    trained_lr = registry.family(backbone_name(arch)).variant(name)["lr"] if registry.has_preset(name) else None
    cfg = pretrained_cfg(arch, dataset, steps, resolution, trained_lr)
    cfg["source"] = f"The Well checkpoint {path} (converted by opzoo's 'the-well' converter)"
    # the weights of a directory need not be the published ones (a retrained or untrained model has the same
    # config), so its card claims no published result
    card = card_text(arch, dataset, steps=steps, fourier_blocks=blocks.get("fourier_blocks"),
                     resolution=resolution, source=f"`{path}` (a checkpoint of The Well's code, converted by opzoo)")
    return opzoo.ConvertedCheckpoint(architecture=backbone_name(arch), model_args=args,
                                     state_dict=map_state_dict(sd, arch, weights), pretrained_cfg=cfg, preset=preset,
                                     card=card)

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
by the_well <= 1.1.0 (the published ones), ``"applied"`` for weights trained from commit 21e51f6 on."""

from __future__ import annotations

import dataclasses
import math
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import torch

import opzoo
from opzoo import CheckFailed, PretrainedArtifacts, PretrainedCheck, kit, read_json

from .architectures import ARCHITECTURES, backbone_name, model_args, preset_name, pretrained_cfg
from .backbones import BACKBONES, WellFnoConfig
from .datasets import DATASETS, dataset
from .provenance import FNO_FIX, PR_64, card_text

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
    return kit.read_safetensors(weights)  # the one reader: each tensor straight into aligned memory, held once


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


# ---- The load checks of the ``well-*`` presets (:class:`opzoo.PretrainedCheck`): the assumptions the
# presets make about The Well's Hub repos, tested on the downloaded files before a model is returned.
#
# * ``config.json agrees with the preset``: the init arguments The Well saved with the weights
#   (``PyTorchModelHubMixin``) match the preset's: ``dim_in``, ``dim_out``, ``n_spatial_dims``,
#   ``spatial_resolution`` and the architecture's own (modes, widths, stages).
# * ``Fourier blocks untrained`` (FNO and TFNO with ``fourier_blocks="dropped"``): the published weights
#   were trained by code that dropped the blocks' output (``fno_net``'s docstring), so the block weights
#   must still be neuraloperator 0.3.0's init draw. Measured per tensor against that draw:
#
#   - dense spectral weights: complex normal, std ``sqrt(2 / (in + out))`` (each of the real and imaginary
#     parts ``1/sqrt(2)`` of it); Tucker core and factors: complex normal with tensorly-torch's std
#     ``(std / prod(sqrt(ranks))) ** (1 / (order + 1))``; the 1x1 skips: PyTorch's Conv default,
#     uniform in ``+-1/sqrt(fan_in)``; the bias: normal with the dense std;
#   - the std ratio to the draw may be at most ``1 + 5`` standard errors (nothing can grow a tensor that
#     gets no gradient) and at least 0.5 (decoupled weight decay, ``configs/optimizer/adam.yaml``: 1e-4,
#     would shrink it; with no gradient AdamW skips the tensor, so 1.0 is expected);
#   - every ratio the same within 5 standard errors (weight decay shrinks all alike), the mean 0 and the
#     kurtosis that of the distribution (3 normal, 1.8 uniform) within 5 standard errors; the shape
#     tests need 256 values at least.
#
#   Trained weights fail: they grow, spread unevenly across tensors and leave the init's distribution.
CONFIG_FILE = "config.json"
MIN_SHAPE_VALUES = 256
Z = 5.0  # standard errors allowed
MIN_SHRINK = 0.5


def _expected_config(cfg) -> dict[str, Any]:
    """The init arguments The Well's class had for the model config ``cfg`` (those config.json records)."""
    out = {"dim_in": cfg.dim_in, "dim_out": cfg.dim_out, "n_spatial_dims": cfg.spatial_dims,
           "spatial_resolution": list(cfg.resolution)}
    for key in ("modes1", "modes2", "hidden_channels", "init_features", "stages", "blocks_per_stage", "blocks_at_neck"):
        if hasattr(cfg, key):
            out[key] = getattr(cfg, key)
    if hasattr(cfg, "modes3") and cfg.spatial_dims == 3:
        out["modes3"] = cfg.modes3
    return out


def config_agrees(artifacts: PretrainedArtifacts) -> str:
    path = artifacts.files.get(CONFIG_FILE)
    if path is None:
        raise CheckFailed(f"the repo has no {CONFIG_FILE}, which every repo The Well pushed has")
    found = read_json(path, "The Well's config.json", error=CheckFailed)
    if not isinstance(found, dict):
        raise CheckFailed(f"{path}: expected a JSON object of init arguments, got {type(found).__name__}")
    expected = _expected_config(artifacts.model_config)
    wrong = [f"{k}: config.json {found[k]!r}, preset {v!r}" for k, v in expected.items()
             if k in found and (list(found[k]) if isinstance(found[k], (list, tuple)) else found[k]) != v]
    missing = [k for k in ("dim_in", "dim_out", "n_spatial_dims", "spatial_resolution") if k not in found]
    if wrong or missing:
        raise CheckFailed(f"{path} disagrees with {artifacts.preset}: " + "; ".join(
            wrong + [f"{k}: missing from config.json" for k in missing])
            + ". The preset's facts are wrong for these weights; convert the repo with its own config instead: "
              f"`opzoo convert the-well DIR OUT --dataset {_dataset_of(artifacts.preset)}"
            + (f" --option fourier_blocks={artifacts.model_config.fourier_blocks}`"
               if hasattr(artifacts.model_config, "fourier_blocks") else "`"))
    return f"{len([k for k in expected if k in found])} init arguments agree (" + ", ".join(
        f"{k}={found[k]}" for k in ("dim_in", "dim_out", "spatial_resolution") if k in found) + ")"


def _dataset_of(preset: str) -> str:
    """The dataset of a ``well-<arch>-<dataset>`` preset (NAME when the preset is not one)."""
    return next((d for d in sorted(DATASETS, key=len, reverse=True) if preset.endswith("-" + d)), "NAME")


@dataclasses.dataclass
class Draw:
    """One block tensor against the init distribution it was drawn from."""

    name: str
    n: int
    ratio: float  # std / the init's std
    ratio_se: float
    mean_z: float  # mean in standard errors of the mean
    kurtosis: float
    kurtosis_expected: float

    @property
    def kurtosis_se(self) -> float:
        return math.sqrt(24.0 / self.n)

    def describe(self) -> str:
        return (f"{self.name}: std {self.ratio:.3f}x the init's (n={self.n}), kurtosis {self.kurtosis:.2f} "
                f"(init {self.kurtosis_expected:.1f}), mean {self.mean_z:+.1f} s.e.")


MOMENT_CHUNK = 1 << 20  # values per float64 pass: the check's copies stay small beside the weights it reads


def _measure(name: str, values: torch.Tensor, std: float, kurtosis: float) -> Draw:
    pieces = values.detach().reshape(-1).split(MOMENT_CHUNK)  # a tensor's moments in float64, a chunk at a time

    def total(f) -> float:
        return sum(float(f(p.double()).sum()) for p in pieces)

    n = values.numel()
    mean = total(lambda p: p) / n
    sd = math.sqrt(total(lambda p: (p - mean) ** 2) / max(n - 1, 1))
    kurt = total(lambda p: (p - mean) ** 4) / n / max(sd, 1e-300) ** 4 if n > 1 else kurtosis
    return Draw(name, n, sd / std, math.sqrt(max(kurtosis - 1.0, 0.5) / (4.0 * n)), mean / (std / math.sqrt(n)),
                kurt, kurtosis)


def _block_draws(sd: dict[str, torch.Tensor], cfg) -> list[Draw]:
    width = cfg.hidden_channels
    dense_std = math.sqrt(2.0 / (width + width))
    draws = []
    for i in range(cfg.n_layers):
        p = f"net.spectral.{i}."
        needed = [p + ("weight" if cfg.factorization == "dense" else "core"), p + "bias", f"net.skips.{i}.weight"]
        missing = [k for k in needed if k not in sd]
        if missing:
            raise CheckFailed(f"the checkpoint lacks {', '.join(missing)} (Fourier block {i} of the "
                              f"{cfg.factorization} {'FNO' if cfg.factorization == 'dense' else 'TFNO'} the preset "
                              f"builds): not the network this preset assumes")
        if cfg.factorization == "dense":
            draws.append(_measure(p + "weight", sd[p + "weight"], dense_std / math.sqrt(2), 3.0))
        else:
            core = sd[p + "core"]
            ranks = core.shape[:-1]
            factor_std = (dense_std / math.prod(math.sqrt(r) for r in ranks)) ** (1.0 / (len(ranks) + 1))
            draws.append(_measure(p + "core", core, factor_std / math.sqrt(2), 3.0))
            k = 0
            while f"{p}factors.{k}" in sd:
                draws.append(_measure(f"{p}factors.{k}", sd[f"{p}factors.{k}"], factor_std / math.sqrt(2), 3.0))
                k += 1
        draws.append(_measure(p + "bias", sd[p + "bias"], dense_std, 3.0))
        skip = sd[f"net.skips.{i}.weight"]
        draws.append(_measure(f"net.skips.{i}.weight", skip, 1.0 / math.sqrt(3.0 * skip[0].numel()), 1.8))
    return draws


def blocks_untrained(artifacts: PretrainedArtifacts) -> str:
    cfg = artifacts.model_config
    if getattr(cfg, "fourier_blocks", "applied") != "dropped":
        return "skipped: fourier_blocks='applied' (the blocks are part of the function, trained or not)"
    draws = _block_draws(dict(artifacts.state_dict), cfg)
    big = [d for d in draws if d.n >= MIN_SHAPE_VALUES]
    shrink = sorted(d.ratio for d in big)[len(big) // 2] if big else 1.0
    problems = []
    for d in draws:
        if d.ratio > 1.0 + Z * d.ratio_se:
            problems.append(f"{d.describe()}: grew (an untouched draw is at most {1 + Z * d.ratio_se:.3f}x)")
        elif d.ratio < MIN_SHRINK:
            problems.append(f"{d.describe()}: shrank below {MIN_SHRINK}x (more than weight decay can do)")
        elif d.n >= MIN_SHAPE_VALUES:
            if abs(d.ratio - shrink) > Z * d.ratio_se + 1e-3:
                problems.append(f"{d.describe()}: scaled unlike the other block tensors (median {shrink:.3f}x)")
            elif abs(d.kurtosis - d.kurtosis_expected) > Z * d.kurtosis_se:
                problems.append(f"{d.describe()}: not the init's distribution (kurtosis off by more than "
                                f"{Z * d.kurtosis_se:.2f})")
            elif abs(d.mean_z) > Z:
                problems.append(f"{d.describe()}: mean away from 0")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise CheckFailed(
            f"the Fourier blocks' weights were trained ({shown}). This preset assumes the_well <= 1.1.0 trained "
            f"them with the blocks' output dropped (fourier_blocks='dropped'), which leaves them an init draw. If "
            f"these weights were trained with the blocks applied (the_well from {FNO_FIX[:7]}, {PR_64}), load them "
            f"with opzoo.load(NAME, pretrained=True, fourier_blocks='applied')")
    return (f"{len(draws)} block tensors are indistinguishable from neuraloperator 0.3.0's init draw (median std "
            f"{shrink:.3f}x the init's; kurtosis and mean as drawn, within {Z:g} standard errors): no training that "
            f"moved them can be seen, as fourier_blocks='dropped' assumes (a few optimizer steps would not show)")


CONFIG_CHECK = PretrainedCheck("config.json agrees with the preset", config_agrees)
BLOCKS_CHECK = PretrainedCheck("Fourier blocks untrained", blocks_untrained)


def checks_for(arch: str) -> tuple[PretrainedCheck, ...]:
    return (CONFIG_CHECK, BLOCKS_CHECK) if arch in ("fno", "tfno") else (CONFIG_CHECK,)


__all__ = ["CONFIG_CHECK", "BLOCKS_CHECK", "checks_for", "config_agrees", "blocks_untrained"]


# ---- The Well's own models (``the_well`` package), timed side by side with opzoo's by ``opzoo benchmark``.
CLASS_NAMES = {"well-fno": "FNO", "well-tfno": "TFNO", "well-unet-classic": "UNetClassic",
               "well-unet-convnext": "UNetConvNext"}
ARCH_FIELDS = {"FNO": ("modes1", "modes2", "modes3", "hidden_channels"),
               "TFNO": ("modes1", "modes2", "modes3", "hidden_channels"),
               "UNetClassic": ("init_features",), "UNetConvNext": ("stages", "blocks_per_stage", "blocks_at_neck",
                                                                   "init_features")}


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def build_the_wells_model(model, x) -> opzoo.Upstream:
    """The Well's class of ``model``'s architecture at its sizes, on the input its formatter makes of ``x``
    (``[B, dim_in, *S]``, normalized: opzoo's ``format_input``, done once before timing)."""
    try:
        from the_well.benchmark import models as well_models
    except ImportError:
        raise opzoo.UpstreamUnavailable("The Well's package is not installed (pip install the_well)") from None
    version = metadata.version("the_well")
    c = model.config
    if isinstance(c, WellFnoConfig):
        # the_well from 1.2.0 (commit 21e51f6) applies the FNO blocks; up to 1.1.0 it computed and dropped them
        applies = _version_tuple(version) >= (1, 2, 0)
        if applies != (c.fourier_blocks == "applied"):
            raise opzoo.UpstreamUnavailable(
                f"the_well {version}'s FNO {'applies' if applies else 'drops'} its Fourier blocks and this model "
                f"{'applies' if c.fourier_blocks == 'applied' else 'drops'} them (fourier_blocks="
                f"{c.fourier_blocks!r}), not the same computation: benchmark with --model-kwargs fourier_blocks="
                f"{'applied' if applies else 'dropped'}")
        fixed = {"n_layers": 4, "lifting_channels": 256, "projection_channels": 256, "rank": 1.0}
        differ = {k: getattr(c, k) for k, v in fixed.items() if getattr(c, k) != v}
        if differ:
            raise opzoo.UpstreamUnavailable(f"The Well's FNO/TFNO fix {fixed}; this model has {differ}")
    name = next((n for n, cls in BACKBONES.items() if type(model) is cls), None)
    if name is None:
        raise opzoo.UpstreamUnavailable(f"{type(model).__name__} is not one of The Well's architectures")
    cls_name = CLASS_NAMES[name]
    args = {k: getattr(c, k) for k in ARCH_FIELDS[cls_name]}
    grid = tuple(x.shape[1:-2])
    module = getattr(well_models, cls_name)(dim_in=c.dim_in, dim_out=c.dim_out, n_spatial_dims=c.spatial_dims,
                                            spatial_resolution=grid, **args)
    return opzoo.Upstream(f"the_well {version} {cls_name}", module, inputs=lambda t: model.format_input(t).detach())

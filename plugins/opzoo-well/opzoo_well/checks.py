"""The load checks of the ``well-*`` presets (:class:`opzoo.PretrainedCheck`): the assumptions the
presets make about The Well's Hub repos, tested on the downloaded files before a model is returned.

* ``config.json agrees with the preset``: the init arguments The Well saved with the weights
  (``PyTorchModelHubMixin``) match the preset's: ``dim_in``, ``dim_out``, ``n_spatial_dims``,
  ``spatial_resolution`` and the architecture's own (modes, widths, stages).
* ``Fourier blocks untrained`` (FNO and TFNO with ``fourier_blocks="dropped"``): the published weights
  were trained by code that dropped the blocks' output (``fno_net``'s docstring), so the block weights
  must still be neuraloperator 0.3.0's init draw. Measured per tensor against that draw:

  - dense spectral weights: complex normal, std ``sqrt(2 / (in + out))`` (each of the real and imaginary
    parts ``1/sqrt(2)`` of it); Tucker core and factors: complex normal with tensorly-torch's std
    ``(std / prod(sqrt(ranks))) ** (1 / (order + 1))``; the 1x1 skips: PyTorch's Conv default,
    uniform in ``+-1/sqrt(fan_in)``; the bias: normal with the dense std;
  - the std ratio to the draw may be at most ``1 + 5`` standard errors (nothing can grow a tensor that
    gets no gradient) and at least 0.5 (decoupled weight decay, ``configs/optimizer/adam.yaml``: 1e-4,
    would shrink it; with no gradient AdamW skips the tensor, so 1.0 is expected);
  - every ratio the same within 5 standard errors (weight decay shrinks all alike), the mean 0 and the
    kurtosis that of the distribution (3 normal, 1.8 uniform) within 5 standard errors; the shape
    tests need 256 values at least.

  Trained weights fail: they grow, spread unevenly across tensors and leave the init's distribution.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from opzoo import CheckFailed, PretrainedArtifacts, PretrainedCheck, read_json

from .provenance import FNO_FIX, PR_64

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
    from .datasets import DATASETS

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


def _measure(name: str, values: torch.Tensor, std: float, kurtosis: float) -> Draw:
    x = values.detach().double().flatten()
    n = x.numel()
    mean, sd = x.mean().item(), x.std().item()
    kurt = (((x - mean) ** 4).mean() / max(sd, 1e-300) ** 4).item() if n > 1 else kurtosis
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

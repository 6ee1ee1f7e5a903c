"""Does the model take the data? Checked while the run is set up, before anything is written.

- files too short (or empty) for ``T_in`` and the requested rollout horizon;
- patch sizes that do not divide the data's resolution;
- what the model's own input checks refuse at that resolution (a ValueError or ConfigError, e.g.
  FNO modes above what the grid resolves): found by one forward pass on the ``meta`` device
  (shapes only, no memory, no compute). Other failures on meta (ops meta tensors cannot run, such
  as data-dependent routing) give no verdict: they are not taken as the model refusing the data.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..data import TrajectoryDataset
from ..errors import ConfigError


def check_frames(source: TrajectoryDataset, t_in: int, t_out: int, horizon: int | None, what: str) -> int:
    """Frames a rollout of ``source`` reads (``T_in + H``); raises ConfigError naming the file and the
    numbers when it has no trajectories or too few frames. ``what`` says whose horizon (a flag, a key)."""
    if len(source) == 0:
        raise ConfigError(f"{source.path}: holds 0 trajectories; nothing to evaluate")
    avail = source.n_steps - t_in
    if avail < t_out:
        raise ConfigError(f"{source.path}: trajectories have {source.n_steps} frames, too short for T_in={t_in} "
                          f"input frames plus at least {t_out} to predict (need >= {t_in + t_out})")
    if horizon is not None:
        if horizon < 1:
            raise ConfigError(f"{what} must be >= 1, got {horizon}")
        if horizon > avail:
            raise ConfigError(f"{source.path}: {what}={horizon} needs T_in + {horizon} = {t_in + horizon} frames per "
                              f"trajectory; the file has {source.n_steps} (at most {what}={avail})")
        return t_in + horizon
    return source.n_steps


def check_resolution(model: nn.Module, resolution: Sequence[int], where: str, flag: str = "data.resolution") -> None:
    """Raise ConfigError when ``model`` cannot run on frames at ``resolution`` (``where`` names the
    data: a file or ``data.resolution``; ``flag``: the option that sets the grid, named in the advice). Patch sizes
    are checked by name; everything else by a forward pass on the meta device."""
    cfg = model.config
    name = getattr(model, "preset_name", None) or type(model).__name__
    patch = getattr(cfg, "patch_size", None)
    if isinstance(patch, int) and any(r % patch for r in resolution):
        raise ConfigError(f"{where}: resolution {list(resolution)} is not divisible by {name}'s patch_size {patch}; "
                          f"set {flag} to a multiple of {patch}")
    try:
        with torch.device("meta"):
            shadow = type(model)(cfg)
    except Exception:  # a model that cannot be built on meta: only the named checks above apply
        return
    x = torch.zeros(1, *resolution, cfg.in_timesteps, cfg.in_channels, device="meta")
    try:
        with torch.no_grad():
            shadow(x)
    except (ValueError, ConfigError) as e:  # a model's own check of its input (e.g. SpectralConv's modes)
        if "meta" in str(e):  # a data-dependent op (.item(), nonzero) that meta tensors cannot run
            return
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        runs = model.grid_for(resolution)[0] if hasattr(model, "grid_for") else None
        advice = (f"{flag} {' '.join(map(str, runs))} runs it" if runs is not None and tuple(runs) != tuple(resolution)
                  else f"give {flag} a grid it takes, or change the model's config")
        raise ConfigError(f"{where}: {name} cannot run on data at resolution {list(resolution)} "
                          f"(T_in={cfg.in_timesteps}, C={cfg.in_channels}): {first}. {advice}") from None
    except Exception:  # meta tensors cannot run everything (data-dependent routing, some dtypes): no verdict
        return

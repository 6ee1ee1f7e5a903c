"""VRMSE, The Well's headline metric (the_well.benchmark.metrics.VRMSE), and its per-field summary.

For a prediction ``x`` and a target ``y`` of one field at one time step,

    VRMSE = sqrt( mean_S (x - y)^2 / (std_S(y)^2 + 1e-7) )

with ``std`` the unbiased standard deviation over the spatial points (``torch.std``), exactly as The
Well's ``NRMSE.eval(..., norm_mode="std")``. A field that is constant in space has VRMSE ``~ RMSE/3e-4``.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

EPS = 1e-7  # The Well's default eps
# The Well's rollout windows as it publishes them ("6:12", "13:30": the predicted frames 6 to 12 and 13 to 30, counted
# from 1) and as its code takes them: python slices [5:12] and [12:30] of the predicted frames (the log-spaced
# intervals of the_well/benchmark/trainer/training.py split_up_losses over its 30-step rollouts, @ 215f55d). Before
# 2026-12 opzoo read them as [6:12] and [13:30], one step late.
WINDOWS = (("6:12", 5, 12), ("13:30", 12, 30))


def vrmse(pred: Tensor, target: Tensor, eps: float = EPS) -> Tensor:
    """``[B, *S, T, C]`` prediction and target -> ``[B, T, C]`` VRMSE (in float32 at least)."""
    if pred.shape != target.shape:
        raise ValueError(f"prediction {list(pred.shape)} and target {list(target.shape)} differ in shape")
    dtype = torch.promote_types(pred.dtype, torch.float32)
    pred, target = pred.to(dtype), target.to(dtype)
    spatial = tuple(range(1, pred.ndim - 2))
    mse = (pred - target).square().mean(spatial)
    var = torch.std(target, dim=spatial) ** 2
    return torch.sqrt(mse / (var + eps))


def vrmse_summary(per_step: Tensor, fields: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per field (and ``full``, the mean over fields): ``one_step``, ``all`` (mean over the rollout)
    and the windows of :data:`WINDOWS` the rollout covers. ``per_step``: ``[T, C]`` (batch-averaged)."""
    if per_step.ndim != 2 or per_step.shape[1] != len(fields):
        raise ValueError(f"per-step VRMSE {list(per_step.shape)} does not match {len(fields)} fields")
    columns = {name: per_step[:, i] for i, name in enumerate(fields)}
    columns["full"] = per_step.mean(1)
    out = {}
    for name, curve in columns.items():
        entry = {"one_step": float(curve[0]), "all": float(curve.mean())}
        for label, a, b in WINDOWS:
            if curve.shape[0] >= b:
                entry[label] = float(curve[a:b].mean())
        out[name] = entry
    return out


def vrmse_fields(model, src) -> dict[str, int] | None:
    """The channels VRMSE is reported for, by name: a model that names its time-varying fields gets
    those; otherwise every channel of the file. Padding and fill values (a field the file lacks) have none."""
    names = src.channel_names
    wanted = model.pretrained_cfg.get("time_varying_fields") or names
    if len(set(names)) != len(names):
        return None  # unnamed or ambiguous channels: evaluate_dataset numbers them
    present = getattr(src, "present", [True] * len(names))
    channels = {names.index(n) for n in wanted if n in names and present[names.index(n)]}
    # named as the file names the field each channel holds, in the file's order (a map may read them under the
    # model's names, transposed: velocity_x as velocity_y), then any other by the model's name
    held = src.source.file_channels()[0] if hasattr(src, "source") else [(n, j) for j, n in enumerate(names)]
    by_file = [(f, j) for f, j in held if j in channels]
    return dict(by_file + [(names[j], j) for j in sorted(channels - {j for _, j in by_file})])

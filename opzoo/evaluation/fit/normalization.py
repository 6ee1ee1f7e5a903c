"""Normalization: as a model's data contract says, inside the model, by its constants, or by statistics of the
training split that the fit computes and the model then carries (:func:`normalization`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import nn

from ...data import TrajectoryDataset
from ...errors import ConfigError
from ...registry.contract import PAD, DataContract, Normalization
from .contract import model_fields, model_name, pad_value_of
from .fields import fitted_names


def normalization_kind(model: nn.Module, norm: Normalization) -> str:
    """The contract's kind for this model's config (``normalization="instance"`` is per-sample, ...)."""
    mode = getattr(model.config, norm.switch, None)
    return norm.by_config.get(str(mode), norm.kind) if mode is not None else norm.kind


def normalization(model: nn.Module, contract: DataContract, plans, changes: Mapping[str, Any],
                  stats_from: list[TrajectoryDataset] | None, progress,
                  name: str | None = None) -> tuple[dict, list[str], dict]:
    """``(config changes, lines, record)``: the contract's normalization for the fitted fields; statistics of the
    training split computed where the contract (or a field without a constant) asks for them."""
    norm = contract.normalization
    kind = normalization_kind(model, norm)
    if kind in ("per-sample", "none") or norm.config is None:
        line = f"normalization: {norm.words if kind == norm.kind else norm.alternatives.get(kind, kind)}"
        return {}, [line + (f" ({norm.source})" if norm.source and kind == norm.kind else "")
                    + (f"; breaks: {norm.breaks}" if norm.breaks and kind == norm.kind else "")], {}
    names = fitted_names(model, plans, model) or [f"channel {i}" for i in range(model.config.in_channels)]
    if "in_channels" in changes and len(names) != changes["in_channels"]:
        names = names[:changes["in_channels"]] + [PAD] * max(0, changes["in_channels"] - len(names))
    mean_key, std_key = norm.config
    ts = next((p.training_set for _, p in plans if p.training_set), None)
    kept_mean, kept_std, why = carried_statistics(model, norm, kind, mean_key, std_key, names, name or model_name(model))
    mean, std, where = [None] * len(names), [None] * len(names), [""] * len(names)
    c = model.config
    # a model that reads channels by position keeps its constants by position (a channel added gets its statistics)
    kept = getattr(c, mean_key, None) or () if kind == "constants" and model_fields(model) is None else ()
    by_position = len(kept) if len(kept) == len(getattr(c, std_key, None) or ()) else 0
    for i, n in enumerate(names):
        if i < by_position:
            mean[i], std[i] = float(getattr(c, mean_key)[i]), float(getattr(c, std_key)[i])
            where[i] = f"{name or model_name(model)}'s pretraining constants, by position"
        elif n in kept_mean and n not in norm.dataset_mean:
            mean[i], std[i], where[i] = kept_mean[n], kept_std[n], why
        elif n in norm.dataset_mean and ts is not None and n in ts.mean and n in kept_std:
            mean[i], std[i], where[i] = ts.mean[n], kept_std[n], f"{ts.name}'s mean ({ts.source}), the std of {why}"
    todo = [i for i, m in enumerate(mean) if m is None]
    record: dict[str, Any] = {"fields": names, "kind": kind}
    lines = []
    if todo:
        parts = stats_from if stats_from is not None else training_parts(plans)
        m_all, s_all = field_statistics(parts, progress)
        span = describe_parts(parts)
        for i in todo:
            n = names[i]
            if n == PAD or i >= len(m_all):  # padding: its value, and no spread
                mean[i], std[i], where[i] = pad_value_of(model, contract), 0.0, "padding"
            elif n in norm.dataset_mean and n in kept_std:
                mean[i], std[i], where[i] = float(m_all[i]), kept_std[n], f"the mean of {span}, as upstream took " \
                                                                          f"{n}'s per dataset; the std of {why}"
            else:
                mean[i], std[i], where[i] = float(m_all[i]), float(s_all[i]), span
        record["from"] = span
    floor = norm.min_std
    std = [s if s >= floor else floor for s in std]
    record.update(mean=mean, std=std)
    groups: dict[str, list[int]] = {}
    for i, w in enumerate(where):
        groups.setdefault(w, []).append(i)
    if kind == "constants" and todo and all(w in (record.get("from"), "padding") for w in where):
        lines.append(f"normalization: each channel z-scored inside the model by the constants its config carries: "
                     f"here every channel's are its training split's statistics (none of "
                     f"{name or model_name(model)}'s pretraining constants belongs to a channel it reads now)")
    elif kind == norm.kind:  # the source and the breaking case are the default kind's, not an alternative's
        lines.append(f"normalization: {norm.words} ({norm.source})" + (f"; breaks: {norm.breaks}" if norm.breaks
                                                                         else ""))
    else:
        lines.append(f"normalization: {norm.alternatives.get(kind, kind)}")
    for w, idx in groups.items():
        lines.append(f"normalization: {', '.join(names[i] for i in idx)}: mean "
                     f"{_values([mean[i] for i in idx])}, std {_values([std[i] for i in idx])} ({w})")
    config = {mean_key: tuple(mean), std_key: tuple(std)}
    return config, lines, record


def carried_statistics(model: nn.Module, norm: Normalization, kind: str, mean_key: str, std_key: str,
             names: list[str], name: str) -> tuple[dict, dict, str]:
    """The statistics the model carries, by field: its config's constants (a ``constants`` contract), or those a fit
    recorded with it (``pretrained_cfg['normalization']``, for the same fields)."""
    c = model.config
    mean, std = getattr(c, mean_key, None), getattr(c, std_key, None)
    own = model_fields(model)
    if not mean or not std or own is None or len(mean) != len(own):
        return {}, {}, ""
    recorded = (getattr(model, "pretrained_cfg", None) or {}).get("normalization")
    if isinstance(recorded, Mapping) and recorded.get("fields") == own:
        why = f"recorded with {name}: {recorded.get('from') or 'its training split'}"
    elif kind == "constants":
        why = f"{name}'s pretraining constants"
    else:
        return {}, {}, ""
    return dict(zip(own, map(float, mean))), dict(zip(own, map(float, std))), why


def _values(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def training_parts(plans) -> list[TrajectoryDataset]:
    """Each file's training part by training's rule (all but the last tenth), where statistics come from when the
    caller names none (a zero-shot evaluation)."""
    from ...data.datasets import split_trajectories

    parts = []
    for src, _ in plans:
        whole = TrajectoryDataset(src.source)
        parts.append(split_trajectories(whole, 0.1)[0] if len(whole) > 1 else whole)
    return parts


def describe_parts(parts: Sequence[TrajectoryDataset]) -> str:
    from pathlib import Path

    out = []
    for p in parts:
        idx = p.indices
        span = (f"trajectory {idx[0]}" if len(idx) == 1 else f"trajectories {idx[0]}-{idx[-1]}"
                if idx == list(range(idx[0], idx[-1] + 1)) else f"{len(idx)} trajectories")
        out.append(f"{span} of {Path(p.path).name}")
    return "statistics of " + ", ".join(out) + " (the training split)"


def field_statistics(parts: Sequence[TrajectoryDataset], progress: bool | None = None):
    """Per channel, the mean and the (population) standard deviation over every trajectory, frame and grid point of
    ``parts`` (float64; non-finite values left out), as upstream statistics files are computed."""
    import numpy as np
    from tqdm.auto import tqdm

    total = s1 = s2 = None
    todo = [(p, i) for p in parts for i in range(len(p))]
    for p, i in tqdm(todo, desc="normalization statistics", unit="trajectory", disable=progress is False or None
                     if progress is None else not progress, leave=False):
        x = p.read(i).numpy().astype(np.float64).reshape(-1, p.channels)
        ok = np.isfinite(x)
        x = np.where(ok, x, 0.0)
        n, a, b = ok.sum(0), x.sum(0), (x * x).sum(0)
        total, s1, s2 = (n, a, b) if total is None else (total + n, s1 + a, s2 + b)
    if total is None:
        raise ConfigError("normalization statistics: no training trajectory to compute them from")
    mean = s1 / np.maximum(total, 1)
    var = np.maximum(s2 / np.maximum(total, 1) - mean * mean, 0.0)
    return mean, np.sqrt(var)


def neutral_statistics(name: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Config overrides giving preset ``name`` (with ``overrides``) mean 0 and std 1 for every channel where its
    contract's normalization wants statistics of the data and it has none: for work that runs the network on random
    tensors (``opzoo benchmark``, shape and speed tests), whose cost does not depend on the values. Empty otherwise."""
    from ...registry.registry import get_registry

    registry = get_registry()
    preset = registry.preset(name)
    contract = preset.contract or registry.contract(preset.backbone)
    norm = contract.normalization if contract is not None else None
    if norm is None or norm.config is None:
        return {}
    args = {**registry.get("backbone", preset.backbone).config_class().to_dict(), **preset.args, **(overrides or {})}
    mode = args.get(norm.switch)
    kind = norm.by_config.get(str(mode), norm.kind) if mode is not None else norm.kind
    mean_key, std_key = norm.config
    if kind != "training-split" or args.get(mean_key):
        return {}
    channels = int(args.get("in_channels", 1))
    return {mean_key: [0.0] * channels, std_key: [1.0] * channels}


__all__ = ["carried_statistics", "describe_parts", "field_statistics", "neutral_statistics", "normalization",
           "normalization_kind", "training_parts"]

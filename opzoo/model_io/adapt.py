"""Adapting a pretrained model's input and output layers to new data (timm's ``in_chans`` habit).

Fine-tuning data may have more channels, another resolution or another ``T_in`` than the model was
pretrained on. Instead of refusing, :func:`adapt_model` builds the same architecture with the new
``in_channels``/``out_channels``, ``in_timesteps`` and ``img_size`` and fills it from the pretrained
weights by one rule — **copy what matches, initialize the rest**:

- Every tensor whose shape did not change is copied.
- In a tensor indexed by data channels (the first patch embedding / lifting layer's input, the
  output layer's rows), channel ``c < C_old`` keeps its pretrained weights; the coordinate-grid
  inputs keep theirs (they move behind the new channels); time step ``t`` of the new window keeps the
  weights of the same position counted from the newest frame (``T_old - T_new + t``), so the most
  recent frames keep theirs.
- What has no pretrained counterpart is initialized: weights that *read* a new input (new input
  channels, new hidden units' outgoing columns) start at zero, so the adapted model computes the
  pretrained function on the old channels at step 0; new output rows and new hidden units keep the
  fresh initialization of the architecture (seeded by the run's seed).
- A positional embedding laid out for another resolution is resized bilinearly
  (``align_corners=False``), as the POT backbone does on the fly.

Fewer channels than the model are not adapted: they are padded with 1.0 and masked (docs/training.md).
Which tensors read or write data channels, steps or positions is the backbone's to say: its
class's :meth:`opzoo.Backbone.io_layout` (the POT backbone's in the core, FNO's in opzoo-fourier).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..contracts.io_layout import DimMap
from ..errors import ConfigError
from ..registry.registry import get_registry

logger = logging.getLogger("opzoo")

SHAPE_FIELDS = ("in_channels", "out_channels", "in_timesteps", "img_size")
# config fields that change no tensor, the model rebuilt and every tensor copied: MPP's periodic flag, Walrus's
# per-axis boundaries; a user who sets one keeps it where the data state another (the fit's boundary_plan)
BOUNDARY_FIELDS = ("periodic", "boundaries")


def _remap(old: Tensor, fresh: Tensor, maps: Sequence[DimMap], name: str) -> Tensor:
    """``fresh`` with every slice that has an old counterpart (on all mapped dims) copied from ``old``."""
    out = fresh.detach().clone()
    for m in maps:
        if len(m.index) != fresh.shape[m.dim]:
            raise ConfigError(f"adapting {name}: layout gives {len(m.index)} indices for dim {m.dim} of size {fresh.shape[m.dim]}")
        unmatched = [i for i, j in enumerate(m.index) if j is None]
        if m.fill == "zero" and unmatched:
            out.index_fill_(m.dim, torch.tensor(unmatched, dtype=torch.long), 0.0)
    # gather the old tensor onto the new index space, dimension by dimension
    src, keep = old.detach(), None
    for m in maps:
        idx = torch.tensor([j if j is not None else 0 for j in m.index], dtype=torch.long)
        src = src.index_select(m.dim, idx)
        valid = torch.tensor([j is not None for j in m.index])
        shape = [1] * fresh.ndim
        shape[m.dim] = len(m.index)
        valid = valid.view(shape)
        keep = valid if keep is None else keep & valid
    other = [d for d in range(fresh.ndim) if d not in {m.dim for m in maps}]
    if any(src.shape[d] != fresh.shape[d] for d in other):
        raise ConfigError(f"adapting {name}: unmapped dims differ, pretrained {list(old.shape)} vs new {list(fresh.shape)}")
    return torch.where(keep.expand_as(out), src, out)


def adapt_model(model: nn.Module, *, seed: int = 0, config: Mapping[str, Any] | None = None,
                channel_map: Sequence[int | None] | None = None, **changes: Any) -> nn.Module:
    """``model`` rebuilt with new ``in_channels``/``out_channels``/``in_timesteps``/``img_size`` (see module doc).

    ``config``: other config fields to set that change no tensor (a data contract's normalization statistics, e.g.
    ``{"field_mean": [...], "field_std": [...]}``); they apply after the labels per channel are reset.
    ``channel_map``: new data channel ``i`` keeps the weights of old channel ``channel_map[i]`` (None: a new channel)
    instead of the one at its position (a model that names its fields, adapted to others: each kept field keeps its
    own weights), where the backbone's layout maps channels with :mod:`opzoo.contracts.io_layout`'s helpers.
    Returns ``model`` itself when nothing changes. The weights are copied by the rule above; every
    tensor is checked before the new model is returned, so a failure leaves ``model`` untouched. The adapted model's
    ``adaptation_fills`` says, per tensor that gained slices, how they start (``"zero"`` or ``"init"``).
    """
    old_cfg = model.config
    config = dict(config or {})
    lacking = [k for k in config if not hasattr(old_cfg, k)]
    if lacking:
        raise ConfigError(f"adapt_model: {type(model).__name__}'s config has no {', '.join(lacking)}")
    labels = tuple(getattr(old_cfg, "per_channel_fields", ()))
    unknown = sorted(set(changes) - set(SHAPE_FIELDS) - set(BOUNDARY_FIELDS) - set(labels))
    if unknown:
        raise ConfigError(f"adapt_model: can change only {', '.join(SHAPE_FIELDS + BOUNDARY_FIELDS + labels)}, not "
                          f"{', '.join(unknown)}")
    missing = [k for k in changes if k in BOUNDARY_FIELDS and not hasattr(old_cfg, k)]
    if missing:
        raise ConfigError(f"adapt_model: {type(model).__name__}'s config has no {', '.join(missing)}")
    given_labels = {k: changes.pop(k) for k in labels if k in changes}
    changes = {k: (tuple(v) if k in ("img_size", "boundaries") else bool(v) if k in BOUNDARY_FIELDS else int(v))
               for k, v in changes.items()
               if v is not None and (tuple(v) if k in ("img_size", "boundaries") else v) != _as_cmp(getattr(old_cfg, k))}
    relabelled = {}
    if changes.get("in_channels", old_cfg.in_channels) != old_cfg.in_channels:  # labels of the old channels go
        relabelled = {k: None for k in labels if getattr(old_cfg, k) is not None}
    relabelled |= {k: v for k, v in given_labels.items() if v != getattr(old_cfg, k)}
    relabelled |= {k: v for k, v in config.items() if _as_cmp(v) != _as_cmp(relabelled.get(k, getattr(old_cfg, k)))}
    moved = channel_map is not None and list(channel_map) != list(range(len(channel_map)))
    if not changes and not relabelled and not moved:
        return model
    cls = type(model)
    backbone = get_registry().backbone_name(cls)
    new_cfg = old_cfg.replace(source=f"adapting {backbone} for fine-tuning", **changes, **relabelled)
    shaped = {k: v for k, v in changes.items() if k in SHAPE_FIELDS}
    # a config field that is not a shape may still size a tensor (MPP's state slots): its backbone's layout says how
    from ..contracts.io_layout import channel_correspondence

    with channel_correspondence(channel_map):
        layout = cls.io_layout(old_cfg, new_cfg) if shaped else (cls.io_layout(old_cfg, new_cfg) or {})
    # whether the backbone's layout maps channels by the correspondence (its channel-shaped tensors through
    # opzoo.contracts.io_layout's helpers), or keeps them by position whatever the names
    by_name = moved and layout != (cls.io_layout(old_cfg, new_cfg) if shaped else (cls.io_layout(old_cfg, new_cfg) or {}))
    if layout is None:
        raise ConfigError(
            f"cannot adapt backbone {backbone!r} to {changes}: {cls.__name__} has no io_layout (opzoo.Backbone.io_layout "
            f"says which of its tensors read or write data channels and steps); give it data with its own shape "
            f"({_shape_text(old_cfg)})")
    old_state = model.state_dict()
    if not any(rule is not None for name, rule in layout.items() if name in old_state) and \
            not any(t.is_meta for t in old_state.values()):  # a memory plan's dry run on meta: built as it is
        # no tensor changes (a boundary, the fields' names, statistics): the new model is built with its parameters on
        # the meta device and takes copies of the old tensors, never initialized (a 1.3B model: one copy, not two)
        from .weights import build_for_weights, load_state_dict_strict

        new = build_for_weights(lambda: cls(new_cfg))
        fresh_state = new.state_dict()
        if set(fresh_state) != set(old_state) or any(fresh_state[k].shape != old_state[k].shape for k in old_state):
            raise ConfigError(f"adapting {backbone} to {changes or relabelled}: its tensors change, but its io_layout "
                              "names none")
        state = {name: old.detach().to("cpu", copy=True) for name, old in old_state.items()}  # as the build below
        load_state_dict_strict(new, state, f"adapting {backbone}")
        return _finish(new, model, old_cfg, new_cfg, backbone, changes, config, relabelled, len(state), [], {}, False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = cls(new_cfg)
    fresh_state = new.state_dict()
    state: dict[str, Tensor] = {}
    reshaped: list[str] = []
    for name, fresh in fresh_state.items():
        if name not in old_state:
            raise ConfigError(f"adapting {backbone}: the adapted model has a tensor {name!r} the pretrained one lacks")
        old = old_state[name]
        rule = layout.get(name)
        if rule is not None and old.shape != fresh.shape:
            fresh_only = rule != "resize" and all(j is None for m in rule for j in m.index)
            reshaped.append(f"{name} {list(old.shape)} -> {list(fresh.shape)}"
                            + (" (interpolated)" if rule == "resize" else " (new: initialized afresh, nothing copied)"
                               if fresh_only else " (matching slices copied, rest initialized)"))
        if rule == "resize" and old.shape != fresh.shape:
            state[name] = F.interpolate(old.detach().float(), size=tuple(fresh.shape[2:]),
                                        mode="bilinear" if fresh.ndim == 4 else "trilinear", align_corners=False).to(old.dtype)
        elif rule is not None and rule != "resize":
            state[name] = _remap(old, fresh, rule, name)
        elif old.shape == fresh.shape:
            state[name] = old.detach().clone()
        else:
            raise ConfigError(f"adapting {backbone}: {name} changes shape {list(old.shape)} -> {list(fresh.shape)} "
                              f"and the layout has no rule for it")
    new.load_state_dict(state, strict=True)
    return _finish(new, model, old_cfg, new_cfg, backbone, changes, config, relabelled, len(state), reshaped, layout,
                   by_name)


def _finish(new: nn.Module, model: nn.Module, old_cfg, new_cfg, backbone: str, changes: Mapping[str, Any],
            config: Mapping[str, Any], relabelled: Mapping[str, Any], n_tensors: int, reshaped: list[str],
            layout: Mapping[str, Any], by_name: bool) -> nn.Module:
    """The adapted model's record of its adaptation, its names and facts, and its mode (``model``'s)."""
    fresh_state = new.state_dict()
    new.adaptation_fills = {name: ("zero" if any(m.fill == "zero" and None in m.index for m in rule) else "init")
                            for name, rule in layout.items() if rule != "resize" and name in fresh_state
                            and any(None in m.index for m in rule)}
    new.adaptation_by = "name" if by_name else "position"
    # whether any slice of a reshaped tensor was copied (False: every channel-shaped tensor started afresh)
    new.adaptation_keeps = any(j is not None for rule in layout.values() if rule != "resize" for m in rule
                               for j in m.index) or not any(rule != "resize" for rule in layout.values())
    new.preset_name = getattr(model, "preset_name", None)
    new.pretrained_cfg = _adapted_pretrained_cfg(getattr(model, "pretrained_cfg", {}), changes, _shape_text(old_cfg))
    new.adaptation = reshaped
    logger.info("adapted %s from %s to %s: %d tensors copied unchanged; %s%s", backbone, _shape_text(old_cfg),
                _shape_text(new_cfg), n_tensors - len(reshaped), "; ".join(reshaped) or "no tensor changed shape",
                "".join(f"; {k}: {getattr(old_cfg, k)} -> {getattr(new_cfg, k)}"
                        for k in (*BOUNDARY_FIELDS, *relabelled)
                        if k not in config and getattr(old_cfg, k, None) != getattr(new_cfg, k, None)))
    return new.train(model.training)


def _adapted_pretrained_cfg(cfg: dict[str, Any], changes: dict[str, Any], adapted_from: str) -> dict[str, Any]:
    """The pretrained facts that still hold for the adapted model: the shape facts follow ``changes``; the
    channel names go when the channels change (they named the pretrained model's channels)."""
    cfg = {**cfg, "adapted_from": adapted_from}
    if "in_channels" in changes:
        cfg.pop("fields", None)
        cfg.pop("time_varying_fields", None)
        if "channels" in cfg:
            cfg["channels"] = changes["in_channels"]
    if "in_timesteps" in changes and "in_timesteps" in cfg:
        cfg["in_timesteps"] = changes["in_timesteps"]
    if "img_size" in changes and "resolution" in cfg:
        cfg["resolution"] = list(changes["img_size"])
    return cfg


def _as_cmp(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _shape_text(cfg) -> str:
    parts = [f"in_channels={cfg.in_channels}", f"out_channels={cfg.out_channels}", f"in_timesteps={cfg.in_timesteps}"]
    if hasattr(cfg, "img_size"):
        parts.append(f"img_size={list(cfg.img_size)}")
    return ", ".join(parts)

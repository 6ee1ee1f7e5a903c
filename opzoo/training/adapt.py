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

Fewer channels than the model are not adapted: they are padded with 1.0 and masked (DESIGN §8).
Layouts are known for the ``pot`` (DPOT, AOT-POT, NESTOR) and ``fno`` backbones; a plugin adds one
for its backbone with :func:`register_io_layout`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from ..plugins import get_registry

SHAPE_FIELDS = ("in_channels", "out_channels", "in_timesteps", "img_size")


@dataclasses.dataclass(frozen=True)
class DimMap:
    """How dimension ``dim`` of a tensor maps: ``index[i]`` is the old index of new index ``i`` or None.

    ``fill`` says what an unmatched slice starts as: ``"zero"`` or ``"init"`` (the fresh initialization).
    """

    dim: int
    index: tuple[int | None, ...]
    fill: str = "init"


# a layout: (old config, new config) -> {tensor name: [DimMap, ...] or "resize"}
IOLayout = Callable[[Any, Any], Mapping[str, Sequence[DimMap] | str]]
_LAYOUTS: dict[str, IOLayout] = {}


def register_io_layout(backbone: str, layout: IOLayout) -> IOLayout:
    """Tell :func:`adapt_model` which tensors of registered backbone ``backbone`` depend on the data shape."""
    _LAYOUTS[backbone] = layout
    return layout


def _prefix(n_new: int, n_old: int) -> tuple[int | None, ...]:
    return tuple(i if i < n_old else None for i in range(n_new))


def _newest_aligned(t_new: int, t_old: int) -> tuple[int | None, ...]:
    return tuple(t_old - t_new + t if t_old - t_new + t >= 0 else None for t in range(t_new))


def _time_channel(t_new: int, c_new: int, t_old: int, c_old: int, time_major: bool = True) -> tuple[int | None, ...]:
    """Flattened ``(t, c)`` index ``t * C + c`` (the layout of POT's and FNO's heads)."""
    times = _newest_aligned(t_new, t_old)
    out = []
    for t in range(t_new):
        for c in range(c_new):
            old_t = times[t]
            out.append(old_t * c_old + c if old_t is not None and c < c_old else None)
    return tuple(out)


def _fields_then_grid(c_new: int, c_old: int, grid: int) -> tuple[int | None, ...]:
    return _prefix(c_new, c_old) + tuple(c_old + j for j in range(grid))


def pot_io_layout(old, new) -> dict[str, Sequence[DimMap] | str]:
    """POT: grid channels follow the fields in the patch embedding; its hidden width is ``C_out*p + 3``."""
    d = new.spatial_dims
    hidden = _prefix(new.out_channels * new.patch_size + 3, old.out_channels * old.patch_size + 3)
    out_rows = _time_channel(new.out_timesteps, new.out_channels, old.out_timesteps, old.out_channels)
    return {
        "patch_embed.proj.0.weight": [DimMap(0, hidden), DimMap(1, _fields_then_grid(new.in_channels, old.in_channels, d + 1), "zero")],
        "patch_embed.proj.0.bias": [DimMap(0, hidden)],
        "patch_embed.proj.2.weight": [DimMap(1, hidden, "zero")],
        "time_agg.w": [DimMap(0, _newest_aligned(new.in_timesteps, old.in_timesteps))],
        "pos_embed": "resize",
        "out_head.4.weight": [DimMap(0, out_rows)],
        "out_head.4.bias": [DimMap(0, out_rows)],
    }


def fno_io_layout(old, new) -> dict[str, Sequence[DimMap] | str]:
    """FNO: the lifting layer reads ``T_in*C`` time-major inputs then the grid; the projection writes ``T_out*C``."""
    lift = _time_channel(new.in_timesteps, new.in_channels, old.in_timesteps, old.in_channels)
    lift += tuple(old.in_timesteps * old.in_channels + j for j in range(new.spatial_dims))
    rows = _time_channel(new.out_timesteps, new.out_channels, old.out_timesteps, old.out_channels)
    return {
        "lift.weight": [DimMap(1, lift, "zero")],
        "project.2.weight": [DimMap(0, rows)],
        "project.2.bias": [DimMap(0, rows)],
    }


register_io_layout("pot", pot_io_layout)
register_io_layout("fno", fno_io_layout)


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


def adapt_model(model: nn.Module, *, seed: int = 0, **changes: Any) -> nn.Module:
    """``model`` rebuilt with new ``in_channels``/``out_channels``/``in_timesteps``/``img_size`` (see module doc).

    Returns ``model`` itself when nothing changes. The weights are copied by the rule above; every
    tensor is checked before the new model is returned, so a failure leaves ``model`` untouched.
    """
    unknown = sorted(set(changes) - set(SHAPE_FIELDS))
    if unknown:
        raise ConfigError(f"adapt_model: can change only {', '.join(SHAPE_FIELDS)}, not {', '.join(unknown)}")
    old_cfg = model.config
    changes = {k: (tuple(v) if k == "img_size" else int(v)) for k, v in changes.items()
               if v is not None and (tuple(v) if k == "img_size" else v) != _as_cmp(getattr(old_cfg, k))}
    if not changes:
        return model
    registry = get_registry()
    cls = type(model)
    backbone = registry.backbone_name(cls)
    if backbone not in _LAYOUTS:
        raise ConfigError(
            f"cannot adapt backbone {backbone!r} to {changes}: no input/output layout is registered for it "
            f"(opzoo.training.register_io_layout); give it data with its own shape "
            f"({_shape_text(old_cfg)})")
    new_cfg = old_cfg.replace(source=f"adapting {backbone} for fine-tuning", **changes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = cls(new_cfg)
    layout = _LAYOUTS[backbone](old_cfg, new_cfg)
    old_state, fresh_state = model.state_dict(), new.state_dict()
    state: dict[str, Tensor] = {}
    for name, fresh in fresh_state.items():
        if name not in old_state:
            raise ConfigError(f"adapting {backbone}: the adapted model has a tensor {name!r} the pretrained one lacks")
        old = old_state[name]
        rule = layout.get(name)
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
    new.preset_name = getattr(model, "preset_name", None)
    new.pretrained_cfg = {**getattr(model, "pretrained_cfg", {}), "adapted_from": _shape_text(old_cfg)}
    return new.train(model.training)


def _as_cmp(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _shape_text(cfg) -> str:
    parts = [f"in_channels={cfg.in_channels}", f"out_channels={cfg.out_channels}", f"in_timesteps={cfg.in_timesteps}"]
    if hasattr(cfg, "img_size"):
        parts.append(f"img_size={list(cfg.img_size)}")
    return ", ".join(parts)

"""Fine-tuning: a pretrained model on a user's HDF5 files whose shape may differ from its pretraining data.

The model is brought to the data where the data cannot be brought to the model (docs/training.md):

- **fewer channels** than the model: padded with the model's ``channel_pad_value`` (DPOT's 1.0,
  PDE-Transformer's 0) up to ``in_channels`` and masked out of the loss and the metrics (the model is
  unchanged); a model that takes any number of channels (``takes_any_channel_count``) is given the
  files' own count instead;
- **more channels**, another ``T_in`` (``in_timesteps``) or another resolution (``resolution``):
  the input and output layers are adapted by :func:`opzoo.model_io.adapt.adapt_model` — copy
  what matches, initialize the rest (timm's ``in_chans`` habit);
- **space**: the grid is chosen by :func:`opzoo.training.build.choose_grid` and said: the data's own
  for a model that runs at any grid (:meth:`opzoo.Backbone.grid_for`), else the model's pretraining
  resolution (``pretrained_cfg['resolution']``), to which the data is interpolated (bilinear,
  align_corners=False);
- **boundary**: a model with a ``periodic`` flag follows what the files state (``model.args.periodic``
  overrides it), and says so;
- data of another spatial dimension (a 1-D file for a 2-D model) is an error naming the file and
  both shapes.

Every fine-tuning run evaluates on its test split at step 0 (zero-shot) and at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from torch import nn

from ..errors import ConfigError
from ..model_io.adapt import BOUNDARY_FIELDS, SHAPE_FIELDS, adapt_model
from .build import OpenDataset, open_datasets
from .config import RunConfig, parse_run_config

if TYPE_CHECKING:
    from ..model_io.reference import ModelReference

AXES = "XYZ"


FALLBACK_FINETUNE_LR = 1e-4  # a model that records no recommended fine-tuning lr
SCRATCH_LR = 1e-3  # the pretraining recipe's max lr (docs/training.md), for a run from random init
EVALS_PER_RUN = 5  # test-split evaluations during a fine-tuning run (plus step 0)


def recommended_lr(model: "str | ModelReference", pretrained: bool) -> tuple[float, str]:
    """``(lr, where it comes from)``: the ``finetune_lr`` recorded in the model's ``pretrained_cfg``
    (a preset's, or a saved repo's config.json), else opzoo's fallback; from scratch, the pretraining lr."""
    from ..model_io.loading import saved_pretrained_cfg
    from ..model_io.reference import model_reference
    from ..registry.registry import get_registry

    ref = model_reference(model)
    model = ref.given
    if not pretrained and not ref.saved:  # a saved repo always brings its weights
        return SCRATCH_LR, "the pretraining recipe's max lr (random init)"
    cfg = saved_pretrained_cfg(ref) if ref.saved else get_registry().preset(ref.preset).pretrained_cfg
    lr = cfg.get("finetune_lr")
    if lr is None:
        return FALLBACK_FINETUNE_LR, f"opzoo's fallback: {model} records no finetune_lr in its pretrained_cfg"
    return float(lr), f"recommended in {model}'s pretrained_cfg (finetune_lr)"


def finetune_config(model: "str | ModelReference", data: Sequence[str], output_dir: str, *, steps: int = 500, batch_size: int = 8,
                    lr: float | None = None, resolution: Sequence[int] | None = None, in_timesteps: int | None = None,
                    test_fraction: float = 0.1, pretrained: bool = True, layout: str | None = None,
                    fields: Sequence[str] | None = None,
                    overrides: dict[str, Any] | None = None) -> RunConfig:
    """A validated run config that fine-tunes ``model`` (preset, hf-hub:..., or a saved repo dir) on ``data``.

    Defaults follow the pretraining recipe with the model's recommended max lr (``lr=None``: see
    :func:`recommended_lr`) and no checkpoints in between; the test split is evaluated before
    training (zero-shot), ``EVALS_PER_RUN`` times during it and at the end. ``resolution`` and
    ``in_timesteps`` other than the model's adapt its layers (see the module doc).
    """
    from ..model_io.reference import model_reference

    reference = model_reference(model)
    if lr is None:
        lr = recommended_lr(reference, pretrained)[0]
    document: dict[str, Any] = {
        "output_dir": output_dir,
        "model": {"name": reference.given, "pretrained": pretrained, "adapt": True,
                  "args": {} if in_timesteps is None else {"in_timesteps": int(in_timesteps)}},
        "data": {"datasets": [{"path": p, "test_fraction": test_fraction, **({"layout": layout} if layout else {}),
                               **({"fields": list(fields)} if fields else {})}
                              for p in data],
                 "resolution": list(resolution) if resolution else None},
        "optimizer": {"lr": lr},
        "training": {"steps": steps, "batch_size": batch_size, "eval_every": -(-steps // EVALS_PER_RUN)},
        "checkpoint": {"every": None},
    }
    for dotted, value in (overrides or {}).items():
        node = document
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return parse_run_config(document, source="finetune arguments", reference=reference)


def _file_shape(src) -> str:
    return f"[N={src.shape[0]}, {', '.join(f'{a}={n}' for a, n in zip(AXES, src.spatial))}, T={src.n_steps}, C={src.channels}]"


def _model_shape(cfg) -> str:
    d = getattr(cfg, "spatial_dims", 2)
    return f"[N, {', '.join(AXES[:d])}, T, C] with T_in={cfg.in_timesteps}, C={cfg.in_channels}"


def adapt_to_data(model: nn.Module, cfg: RunConfig, opened: list[OpenDataset] | None = None) -> nn.Module:
    """``model`` adapted to the run's data (more channels, ``data.resolution``, shape fields in ``model.args``).

    ``opened``: the run's files as :func:`opzoo.training.build.open_datasets` opened them (opened here if
    not given). Raises ConfigError naming the file and both shapes when the data cannot fit the model at all.
    """
    mc = model.config
    dims = getattr(mc, "spatial_dims", None)
    labels = tuple(getattr(mc, "per_channel_fields", ()))
    targets = {k: v for k, v in cfg.model.args.items() if k in SHAPE_FIELDS + BOUNDARY_FIELDS + labels}
    widest = None
    for o in open_datasets(cfg) if opened is None else opened:
        for src in (o.train, o.test):
            path = src.path
            if dims is not None and len(src.spatial) != dims:
                raise ConfigError(
                    f"{path}: {len(src.spatial)}-D data shaped {_file_shape(src)} cannot fine-tune "
                    f"{getattr(model, 'preset_name', None) or type(model).__name__}, a {dims}-D model that takes "
                    f"{_model_shape(mc)}; no adaptation changes the number of spatial dimensions")
            if widest is None or src.channels > widest[1].channels:
                widest = (path, src)
    takes_any = getattr(model, "takes_any_channel_count", False)  # the files' own count, never padded
    if widest is not None and (widest[1].channels > targets.get("in_channels", mc.in_channels) or
                               (takes_any and "in_channels" not in targets)):
        if mc.in_channels != mc.out_channels:
            raise ConfigError(f"{widest[0]}: {widest[1].channels} channels, more than the model's {mc.in_channels}, "
                              f"and the model maps {mc.in_channels} -> {mc.out_channels} channels")
        targets["in_channels"] = targets["out_channels"] = widest[1].channels
    if "in_channels" in targets and "out_channels" not in targets and mc.in_channels == mc.out_channels:
        targets["out_channels"] = targets["in_channels"]  # a model of C -> C channels keeps predicting what it reads
    if cfg.data.resolution is not None and hasattr(mc, "img_size"):
        targets["img_size"] = tuple(cfg.data.resolution)
    if "img_size" in targets and hasattr(mc, "patch_size"):
        grid = list(targets["img_size"])
        # one patch for every axis, or one per axis (the spatial ones last: GPhyT's is (time, height, width))
        patch = list(mc.patch_size)[-len(grid):] if isinstance(mc.patch_size, (list, tuple)) else [mc.patch_size] * len(grid)
        if any(s % p for s, p in zip(grid, patch)):
            raise ConfigError(f"data.resolution: {grid} is not divisible by the model's patch_size "
                              f"{mc.patch_size}; pick a multiple of {patch} on each axis")
    targets.update(_boundary_from_files(model, cfg, opened))
    adapted = adapt_model(model, seed=cfg.seed, **targets)
    if adapted is not model and "img_size" in targets:
        adapted.pretrained_cfg["resolution"] = list(targets["img_size"])
    return adapted


def _boundary_from_files(model: nn.Module, cfg: RunConfig, opened: list[OpenDataset] | None) -> dict[str, bool]:
    """``{"periodic": ...}`` when the model has a ``periodic`` boundary flag and the files state another boundary
    (periodic on every axis, or not): the flag follows the files, and says so; ``model.args.periodic`` in the run
    config is the user's word and wins, also said when a file disagrees. Files that disagree among themselves are
    refused: one model has one boundary."""
    import logging

    if not hasattr(model.config, "periodic"):
        return {}
    stated = {}
    for o in open_datasets(cfg) if opened is None else opened:
        if o.train.periodic is not None:
            stated[o.train.path] = (o.train.periodic, o.train.boundary)
    kinds = {p for p, _ in stated.values()}
    if len(kinds) > 1:
        raise ConfigError("the data files state different boundaries (" + "; ".join(
            f"{path}: {words}" for path, (_, words) in stated.items()) + "): fine-tune on files of one boundary, or "
            "set model.args.periodic to choose one")
    if not kinds:
        return {}
    periodic = kinds.pop()
    name = getattr(model, "preset_name", None) or type(model).__name__
    words = "; ".join(f"{path}: {w}" for path, (_, w) in stated.items())
    user = cfg.model.args.get("periodic")
    log = logging.getLogger("opzoo")
    if user is not None:
        if bool(user) != periodic:
            log.info("boundary: periodic=%s as model.args says, although the data states %s", bool(user), words)
        return {}
    if bool(model.config.periodic) == periodic:
        return {}
    log.info("boundary: periodic=%s for %s, as the data states (%s; %s was periodic=%s; --set model.args.periodic="
             "%s keeps it)", periodic, name, words, name, model.config.periodic, str(model.config.periodic).lower())
    return {"periodic": periodic}

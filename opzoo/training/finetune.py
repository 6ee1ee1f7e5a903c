"""Fine-tuning: a pretrained model on a user's HDF5 files whose shape may differ from its pretraining data.

The model is brought to the data where the data cannot be brought to the model (DESIGN §8):

- **fewer channels** than the model: padded with 1.0 up to ``in_channels`` and masked out of the
  loss and the metrics (the model is unchanged);
- **more channels**, another ``T_in`` (``in_timesteps``) or another resolution (``resolution``):
  the input and output layers are adapted by :func:`opzoo.model_io.adapt.adapt_model` — copy
  what matches, initialize the rest (timm's ``in_chans`` habit);
- **space** is otherwise interpolated (bilinear, align_corners=False) to the model's pretraining
  resolution (``pretrained_cfg['resolution']``);
- data of another spatial dimension (a 1-D file for a 2-D model) is an error naming the file and
  both shapes.

Every fine-tuning run evaluates on its test split at step 0 (zero-shot) and at the end.
"""

from __future__ import annotations

from typing import Any, Sequence

from torch import nn

from ..errors import ConfigError
from ..model_io.adapt import SHAPE_FIELDS, adapt_model
from .build import OpenDataset, open_datasets
from .config import RunConfig, parse_run_config

AXES = "XYZ"


FALLBACK_FINETUNE_LR = 1e-4  # a model that records no recommended fine-tuning lr
SCRATCH_LR = 1e-3  # the pretraining recipe's max lr (DESIGN §8), for a run from random init
EVALS_PER_RUN = 5  # test-split evaluations during a fine-tuning run (plus step 0)


def recommended_lr(model: str, pretrained: bool) -> tuple[float, str]:
    """``(lr, where it comes from)``: the ``finetune_lr`` recorded in the model's ``pretrained_cfg``
    (a preset's, or a saved repo's config.json), else opzoo's fallback; from scratch, the pretraining lr."""
    from ..host.registry import get_registry
    from ..model_io.builder import saved_pretrained_cfg
    from ..model_io.reference import parse_model_reference

    saved = parse_model_reference(model).saved  # a saved repo always brings its weights
    if not pretrained and not saved:
        return SCRATCH_LR, "the pretraining recipe's max lr (random init)"
    cfg = saved_pretrained_cfg(model) if saved else get_registry().preset(model).pretrained_cfg
    lr = cfg.get("finetune_lr")
    if lr is None:
        return FALLBACK_FINETUNE_LR, f"opzoo's fallback: {model} records no finetune_lr in its pretrained_cfg"
    return float(lr), f"recommended in {model}'s pretrained_cfg (finetune_lr)"


def finetune_config(model: str, data: Sequence[str], output_dir: str, *, steps: int = 500, batch_size: int = 8,
                    lr: float | None = None, resolution: Sequence[int] | None = None, in_timesteps: int | None = None,
                    test_fraction: float = 0.1, pretrained: bool = True, layout: str | None = None,
                    overrides: dict[str, Any] | None = None) -> RunConfig:
    """A validated run config that fine-tunes ``model`` (preset, hf-hub:..., or a saved repo dir) on ``data``.

    Defaults follow the pretraining recipe with the model's recommended max lr (``lr=None``: see
    :func:`recommended_lr`) and no checkpoints in between; the test split is evaluated before
    training (zero-shot), ``EVALS_PER_RUN`` times during it and at the end. ``resolution`` and
    ``in_timesteps`` other than the model's adapt its layers (see the module doc).
    """
    if lr is None:
        lr = recommended_lr(model, pretrained)[0]
    document: dict[str, Any] = {
        "output_dir": output_dir,
        "model": {"name": model, "pretrained": pretrained, "adapt": True,
                  "args": {} if in_timesteps is None else {"in_timesteps": int(in_timesteps)}},
        "data": {"datasets": [{"path": p, "test_fraction": test_fraction, **({"layout": layout} if layout else {})}
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
    return parse_run_config(document, source="finetune arguments")


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
    targets = {k: v for k, v in cfg.model.args.items() if k in SHAPE_FIELDS}
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
    if widest is not None and widest[1].channels > targets.get("in_channels", mc.in_channels):
        if mc.in_channels != mc.out_channels:
            raise ConfigError(f"{widest[0]}: {widest[1].channels} channels, more than the model's {mc.in_channels}, "
                              f"and the model maps {mc.in_channels} -> {mc.out_channels} channels")
        targets["in_channels"] = targets["out_channels"] = widest[1].channels
    if cfg.data.resolution is not None and hasattr(mc, "img_size"):
        targets["img_size"] = tuple(cfg.data.resolution)
    if "img_size" in targets and hasattr(mc, "patch_size"):
        bad = [s for s in targets["img_size"] if s % mc.patch_size]
        if bad:
            raise ConfigError(f"data.resolution: {list(targets['img_size'])} is not divisible by the model's "
                              f"patch_size {mc.patch_size}; pick a multiple of {mc.patch_size}")
    adapted = adapt_model(model, seed=cfg.seed, **targets)
    if adapted is not model and "img_size" in targets:
        adapted.pretrained_cfg["resolution"] = list(targets["img_size"])
    return adapted

"""Building what a run needs from its config: the model, the data mixture and the test sets.

Each data file is opened once per run (:func:`open_datasets`); fine-tuning's shape adaptation and the
mixture read the same open files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from torch import nn

from ..data import FrameShape, MixtureDataset, TrajectoryDataset, WindowDataset, split_trajectories
from ..data.errors import DataFormatError
from ..errors import ConfigError
from ..evaluation.fit import fit_data, open_trajectories
from ..evaluation.shape_check import check_frames
from ..model_io.adapt import BOUNDARY_FIELDS, SHAPE_FIELDS
from ..model_io.loading import load
from ..model_io.size_check import check_batch_memory
from ..registry.registry import get_registry
from .config import DatasetSpec, RunConfig


def build_run_model(section) -> nn.Module:
    """A preset (``pretrained`` weights optional), a registered backbone, or a saved repo / Hub id."""
    ref = section.reference
    if ref.kind != "backbone":
        # with adapt, the shape fields (and labels per channel) are targets of opzoo.model_io.adapt, not load overrides
        adapted = SHAPE_FIELDS + BOUNDARY_FIELDS + label_fields(ref)
        args = {k: v for k, v in section.args.items() if not (section.adapt and k in adapted)}
        return load(ref, pretrained=section.pretrained, **args, **_oversize(section))
    if section.pretrained:
        raise ConfigError(f"model.pretrained: {ref.given!r} is a bare backbone with no weights; name a preset or a repo")
    return load(ref, **section.args, **_oversize(section))


def label_fields(ref) -> tuple[str, ...]:
    """The fields of the preset's config that hold one entry per channel (``ModelConfig.per_channel_fields``): they
    follow the channel count, so fine-tuning sets them with it."""
    if ref.kind != "preset":
        return ()
    registry = get_registry()
    return tuple(registry.get("backbone", registry.preset(ref.preset).backbone).config_class.per_channel_fields)


def _oversize(section) -> dict:
    return {"allow_oversize": True} if section.allow_oversize else {}


@dataclass
class OpenDataset:
    """One dataset of a run, its files opened: the train, test and (``validation_fraction``) validation
    trajectories."""

    spec: DatasetSpec
    train: TrajectoryDataset
    test: TrajectoryDataset
    validation: TrajectoryDataset | None = None


def open_datasets(cfg: RunConfig) -> list[OpenDataset]:
    """Every dataset of the run, each file opened once: a separate test file, or the last ``test_fraction`` of the
    file held out (:func:`opzoo.data.split_trajectories`); ``validation_fraction``: the trajectories just before the
    test split held out for validation (:func:`validation_split`); ``train_trajectories``: the first N of what is left
    (file order: nested across N, and never a validation or test trajectory)."""
    opened = []
    for d in cfg.data.datasets:
        trajectories = open_trajectories(d.path, d.layout, d.fields)
        if d.test_path is not None:
            train, test = trajectories, open_trajectories(d.test_path, d.layout, d.fields)
        else:
            try:
                train, test = split_trajectories(trajectories, d.test_fraction)
            except DataFormatError as e:
                raise ConfigError(str(e)) from None
        train, validation = validation_split(train, d.validation_fraction, len(trajectories), d.path)
        if d.train_trajectories is not None:
            if d.train_trajectories > len(train):
                held = " beside its validation split" if validation is not None else ""
                raise ConfigError(f"{d.path}: train_trajectories={d.train_trajectories}, but its training split holds "
                                  f"{len(train)} trajectories{held}; give at most {len(train)} (or a larger file)")
            train = train.subset(list(train.indices[:d.train_trajectories]))
        opened.append(OpenDataset(d, train, test, validation))
    return opened


def validation_count(fraction: float, n_file: int) -> int:
    """How many of a file's ``n_file`` trajectories ``validation_fraction`` holds out: ``round(fraction * n_file)``,
    at least one (0 for a fraction of 0)."""
    return max(1, int(round(fraction * n_file))) if fraction > 0 else 0


def validation_split(train: TrajectoryDataset, fraction: float, n_file: int,
                     path: str) -> tuple[TrajectoryDataset, TrajectoryDataset | None]:
    """``(train, validation)``: the last :func:`validation_count` trajectories of the training split held out."""
    n_val = validation_count(fraction, n_file)
    if not n_val:
        return train, None
    if n_val >= len(train):
        raise ConfigError(f"{path}: validation_fraction {fraction:g} holds out {n_val} trajectories, but the training "
                          f"split has {len(train)}: none would be left to train on; give a smaller fraction (or a "
                          f"larger file)")
    cut = len(train) - n_val
    return train.subset(list(train.indices[:cut])), train.subset(list(train.indices[cut:]))


@dataclass
class RunData:
    frame_shape: FrameShape
    train: MixtureDataset
    test: list[tuple[str, TrajectoryDataset]]
    test_frames: list[int]  # frames each test set's evaluation reads (T_in + horizon)
    grid: str = ""  # which grid the run uses and why (GridChoice.line)
    fit: list[str] | None = None  # the fit block (evaluation.fit.FittedData.lines)
    fields: list[str] | None = None  # the field each of the model's channels was trained on (<pad>: padding)
    validation: list[tuple[str, TrajectoryDataset]] = field(default_factory=list)  # validation_fraction's splits


def fit_run_data(model: nn.Module, cfg: RunConfig, opened: list[OpenDataset]):
    """The one fit (:func:`opzoo.evaluation.fit.fit_data`) of the run's files to ``model``: fields (each dataset's
    ``field_map`` and ``training_set``), channels (adapted to other fields or more channels when ``model.adapt``),
    the grid (chosen by the training splits), the boundary and normalization statistics (of the training splits);
    with ``model.adapt`` also the shape fields of :func:`opzoo.training.finetune.adaptation_targets`, in the same
    rebuild."""
    sources = [src for o in opened for src in (o.train, o.test)]
    targets = adaptation_targets(model, cfg) if cfg.model.adapt else None
    maps = [m for o in opened for m in (o.spec.field_map, o.spec.field_map)]
    sets = [t for o in opened for t in (o.spec.training_set, o.spec.training_set)]
    return fit_data(model, sources, cfg.data.resolution, "data.resolution", grid_from=[o.train for o in opened],
                    channels=cfg.data.channels, adapt_channels=cfg.model.adapt, field_map=maps, training_set=sets,
                    train=True, targets=targets, stats_from=[o.train for o in opened], seed=cfg.seed,
                    name=cfg.model.name, keep_boundary=bool(set(BOUNDARY_FIELDS) & set(cfg.model.args)))


def build_data(cfg: RunConfig, model: nn.Module, opened: list[OpenDataset] | None = None, fitted=None) -> RunData:
    """Check every dataset (``opened``, or opened here: metadata only) fits the model (``fitted``: the run's fit, made
    here if not given), and build the mixture."""
    mc = model.config
    channels = cfg.data.channels or mc.in_channels
    if channels != mc.in_channels:
        raise ConfigError(f"data.channels={channels} but the model takes in_channels={mc.in_channels}")
    if mc.out_channels != mc.in_channels:
        raise ConfigError(f"auto-regressive training needs in_channels == out_channels, the model has "
                          f"{mc.in_channels} -> {mc.out_channels}")
    opened = open_datasets(cfg) if opened is None else opened
    splits = [(o.spec, o.train, o.test) for o in opened]
    sources = [src for _, tr, te in splits for src in (tr, te)]
    if fitted is None:
        fitted = fit_run_data(model, cfg, opened)
        if fitted.model is not model:
            raise ConfigError("the run's data needs the model adapted (channels, statistics): fit it first "
                              "(opzoo.training.build.fit_run_data) and build the data for the fitted model")
    shape, grid = fitted.frame_shape, fitted.grid
    for src in sources:
        if src.channels > channels:
            raise ConfigError(f"{src.path}: {src.channels} channels, more than the model's {channels}; "
                              f"train a model with in_channels >= {src.channels}")
    for d, tr, _ in splits:
        if tr.n_steps < mc.in_timesteps + mc.out_timesteps:
            raise ConfigError(f"{tr.path}: trajectories have {tr.n_steps} frames, fewer than T_in + T_out = "
                              f"{mc.in_timesteps} + {mc.out_timesteps} = {mc.in_timesteps + mc.out_timesteps}: "
                              + (f"take a shorter input window (opzoo finetune --in-timesteps "
                                 f"{tr.n_steps - mc.out_timesteps}, or model.in_timesteps), or " if
                                 tr.n_steps > mc.out_timesteps else "give ") + "longer trajectories")
    test_frames = [check_frames(te, mc.in_timesteps, mc.out_timesteps, cfg.data.horizon, "data.horizon")
                   for _, _, te in splits]
    validation = [(o.spec.name, o.validation) for o in opened if o.validation is not None]
    for _, va in validation:
        check_frames(va, mc.in_timesteps, mc.out_timesteps, cfg.data.horizon, "data.horizon")
    check_batch_memory(cfg.training.batch_size, shape.resolution, mc.in_timesteps + mc.out_timesteps, channels,
                       f"training.batch_size {cfg.training.batch_size}", cfg.model.allow_oversize)
    parts = [WindowDataset(tr, mc.in_timesteps, mc.out_timesteps, resolution=shape.resolution,
                           n_channels=channels, pad_value=shape.pad_value, resample=shape.resample, dataset_index=k)
             for k, (d, tr, _) in enumerate(splits)]
    mixture = MixtureDataset(parts, [d.weight for d, _, _ in splits], names=[d.name for d, _, _ in splits])
    return RunData(shape, mixture, [(d.name, te) for d, _, te in splits], test_frames,
                   grid.line([src for _, tr, te in splits for src in (tr, te)], training=True, mode=shape.resample),
                   fitted.lines, fitted.record.get("fields"), validation)


def prepare_run_data(cfg: RunConfig, model: nn.Module, say: Callable[[str], None]):
    """What a run does with its files before its first step, said through ``say``: the test splits lose what the
    base model trained on, the one fit (:func:`fit_run_data`: its block), the mixture (:func:`build_data`) and the
    check of the test and validation sets. Returns ``(fitted, data)``; ``fitted.model`` is the model the run trains.
    ``opzoo finetune`` and ``opzoo fit --finetune`` both run it: the preview is the run's own fit."""
    from ..evaluation.bad_data import check_test_sets
    from ..evaluation.fit import say_block
    from ..evaluation.splits import drop_seen_from_tests

    opened = open_datasets(cfg)
    for line in drop_seen_from_tests(model, opened):  # what the base trained on is not held out here either
        say(line)
    fitted = fit_run_data(model, cfg, opened)  # fields, channels, grid, boundary, normalization
    say_block(fitted, say)
    data = build_data(cfg, fitted.model, opened, fitted)
    check_test_sets(data.test, data.test_frames, cfg.data.max_test_trajectories)
    if data.validation:
        mc = fitted.model.config
        check_test_sets(data.validation, [check_frames(va, mc.in_timesteps, mc.out_timesteps, cfg.data.horizon,
                                                       "data.horizon") for _, va in data.validation],
                        cfg.data.max_test_trajectories, what="validation")
    return fitted, data


def adaptation_targets(model: nn.Module, cfg: RunConfig) -> dict[str, Any]:
    """What a fine-tuning run changes in the model besides its channels (which the fit decides): the shape fields the
    run's ``model.args`` give (``in_timesteps``, ``img_size``, an explicit ``in_channels``...), ``data.resolution``
    as ``img_size``, labels per channel, and the boundary the model args set (the fit makes a ``periodic`` flag follow
    the data otherwise: :func:`opzoo.evaluation.fit.boundary_plan`)."""
    mc = model.config
    labels = tuple(getattr(mc, "per_channel_fields", ()))
    targets = {k: v for k, v in cfg.model.args.items() if k in SHAPE_FIELDS + BOUNDARY_FIELDS + labels}
    if targets.get("out_channels") == targets.get("in_channels"):
        targets.pop("out_channels", None)  # the fit sets both: a model of C -> C channels predicts what it reads
    if cfg.data.resolution is not None and hasattr(mc, "img_size"):
        targets["img_size"] = tuple(cfg.data.resolution)
    if "img_size" in targets and hasattr(mc, "patch_size"):
        grid = list(targets["img_size"])
        # one patch for every axis, or one per axis (the spatial ones last: GPhyT's is (time, height, width))
        patch = list(mc.patch_size)[-len(grid):] if isinstance(mc.patch_size, (list, tuple)) else [mc.patch_size] * len(grid)
        if any(s % p for s, p in zip(grid, patch)):
            raise ConfigError(f"data.resolution: {grid} is not divisible by the model's patch_size "
                              f"{mc.patch_size}; pick a multiple of {patch} on each axis")
    return targets

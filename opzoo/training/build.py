"""Building what a run needs from its config: the model, the data mixture and the test sets.

Each data file is opened once per run (:func:`open_datasets`); fine-tuning's shape adaptation and the
mixture read the same open files.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..data import FrameShape, MixtureDataset, TrajectoryDataset, WindowDataset, split_trajectories
from ..data.errors import DataFormatError
from ..errors import ConfigError
from ..evaluation.fit import fit_data, open_trajectories
from ..evaluation.shape_check import check_frames, check_resolution
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
    """One dataset of a run, its files opened: the train and test trajectories."""

    spec: DatasetSpec
    train: TrajectoryDataset
    test: TrajectoryDataset


def open_datasets(cfg: RunConfig) -> list[OpenDataset]:
    """Every dataset of the run, each file opened once: a separate test file, or the last
    ``test_fraction`` of the file held out (:func:`opzoo.data.split_trajectories`)."""
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
        opened.append(OpenDataset(d, train, test))
    return opened


@dataclass
class RunData:
    frame_shape: FrameShape
    train: MixtureDataset
    test: list[tuple[str, TrajectoryDataset]]
    test_frames: list[int]  # frames each test set's evaluation reads (T_in + horizon)
    grid: str = ""  # which grid the run uses and why (GridChoice.line)


def build_data(cfg: RunConfig, model: nn.Module, opened: list[OpenDataset] | None = None) -> RunData:
    """Check every dataset (``opened``, or opened here: metadata only) fits the model, and build the mixture."""
    mc = model.config
    channels = cfg.data.channels or mc.in_channels
    if channels != mc.in_channels:
        raise ConfigError(f"data.channels={channels} but the model takes in_channels={mc.in_channels}")
    if mc.out_channels != mc.in_channels:
        raise ConfigError(f"auto-regressive training needs in_channels == out_channels, the model has "
                          f"{mc.in_channels} -> {mc.out_channels}")
    splits = [(o.spec, o.train, o.test) for o in (open_datasets(cfg) if opened is None else opened)]
    sources = [src for _, tr, te in splits for src in (tr, te)]
    fitted = fit_data(model, sources, cfg.data.resolution, "data.resolution", grid_from=[tr for _, tr, _ in splits],
                      channels=channels, adapt_channels=False)
    shape, grid = fitted.frame_shape, fitted.grid
    for src in sources:
        if src.channels > channels:
            raise ConfigError(f"{src.path}: {src.channels} channels, more than the model's {channels}; "
                              f"train a model with in_channels >= {src.channels}")
    for d, tr, _ in splits:
        if tr.n_steps < mc.in_timesteps + mc.out_timesteps:
            raise ConfigError(f"{tr.path}: trajectories have {tr.n_steps} frames, fewer than "
                              f"T_in + T_out = {mc.in_timesteps + mc.out_timesteps}")
    test_frames = [check_frames(te, mc.in_timesteps, mc.out_timesteps, cfg.data.horizon, "data.horizon")
                   for _, _, te in splits]
    where = "data.resolution" if cfg.data.resolution else f"{splits[0][1].path} (the run's resolution)"
    check_resolution(model, shape.resolution, where)
    check_batch_memory(cfg.training.batch_size, shape.resolution, mc.in_timesteps + mc.out_timesteps, channels,
                       f"training.batch_size {cfg.training.batch_size}", cfg.model.allow_oversize)
    parts = [WindowDataset(tr, mc.in_timesteps, mc.out_timesteps, resolution=shape.resolution,
                           n_channels=channels, pad_value=shape.pad_value, dataset_index=k)
             for k, (d, tr, _) in enumerate(splits)]
    mixture = MixtureDataset(parts, [d.weight for d, _, _ in splits], names=[d.name for d, _, _ in splits])
    return RunData(shape, mixture, [(d.name, te) for d, _, te in splits], test_frames,
                   "\n".join([*dict.fromkeys(fitted.fields),
                               grid.line([src for _, tr, te in splits for src in (tr, te)], training=True)]))

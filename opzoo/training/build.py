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
from ..model_io.adapt import BOUNDARY_FIELDS, SHAPE_FIELDS
from ..model_io.builder import create_model, load
from .config import DatasetSpec, RunConfig
from .shape_check import check_frames, check_resolution


def build_run_model(section) -> nn.Module:
    """A preset (``pretrained`` weights optional), a registered backbone, or a saved repo / Hub id."""
    from ..model_io.reference import parse_model_reference

    name = section.name
    if parse_model_reference(name).kind != "backbone":
        # with adapt, the shape fields are targets of opzoo.model_io.adapt, not load overrides
        args = {k: v for k, v in section.args.items() if not (section.adapt and k in SHAPE_FIELDS + BOUNDARY_FIELDS)}
        return load(name, pretrained=section.pretrained, **args, **_oversize(section))
    if section.pretrained:
        raise ConfigError(f"model.pretrained: {name!r} is a bare backbone with no weights; name a preset or a repo")
    return create_model(name, **section.args, **_oversize(section))


def _oversize(section) -> dict:
    return {"allow_oversize": True} if section.allow_oversize else {}


def model_resolution(model: nn.Module) -> tuple[int, ...] | None:
    """The resolution a model was pretrained at (``pretrained_cfg['resolution']``), if it says."""
    res = getattr(model, "pretrained_cfg", {}).get("resolution")
    if res is None:
        img = getattr(model.config, "img_size", None)
        dims = getattr(model.config, "spatial_dims", 2)
        if isinstance(img, int):
            res = [img] * dims
        elif isinstance(img, (list, tuple)):
            res = list(img)
    return tuple(int(r) for r in res) if res else None


@dataclass
class GridChoice:
    """The grid a model runs data at, and why (said to the user before any data is resampled)."""

    resolution: tuple[int, ...]
    why: str
    resampled: bool  # some file is not at ``resolution``: it is interpolated

    def line(self, sources: list[TrajectoryDataset], training: bool = False) -> str:
        """What a command says before it reads data (``training``: a run, which also trains at the model's grid)."""
        grids = sorted({tuple(s.spatial) for s in sources})
        text = "x".join(map(str, self.resolution))
        if not self.resampled:
            return f"grid: {text}, the data's own ({self.why})"
        files = ", ".join("x".join(map(str, g)) for g in grids)
        trains = "training frames are resampled to it (bilinear); " if training else ""
        return (f"grid: the model runs at {text} ({self.why}); {trains}inputs are resampled to it and predictions "
                f"back: scores are computed at the file's own grid ({files})")


def choose_grid(model: nn.Module, sources: list[TrajectoryDataset], resolution=None, flag: str = "--resolution") \
        -> GridChoice:
    """The one rule for the grid data is brought to: ``resolution`` when the user names one (``flag``); else what
    the backbone asks for given the first file's grid (:meth:`opzoo.Backbone.grid_for`: a model without a
    resolution-bound embedding keeps the data's own); else the model's pretrained grid; else the first file's."""
    first = tuple(sources[0].spatial)
    if resolution:
        grid, why = tuple(int(r) for r in resolution), f"{flag}"
    else:
        grid, why = (model.grid_for(first) if hasattr(model, "grid_for") else (None, ""))
        if grid is None:
            pretrained = model_resolution(model)
            grid, why = (pretrained, "the model's pretrained grid; " + flag + " sets another") if pretrained else \
                (first, "the first file's")
    return GridChoice(tuple(grid), why, any(tuple(s.spatial) != tuple(grid) for s in sources))


def frame_shape(model: nn.Module, resolution: tuple[int, ...], channels: int | None = None) -> FrameShape:
    """The frames ``model`` takes at ``resolution``: its channels (padded with its ``channel_pad_value``)."""
    c = model.config
    return FrameShape(tuple(resolution), channels or c.in_channels, c.in_timesteps, c.out_timesteps,
                      float(getattr(model, "channel_pad_value", 1.0)))


def open_trajectories(path: str, layout: str | None = None, fields: list[str] | None = None) -> TrajectoryDataset:
    """A file's trajectories (``fields``: the names of a plain array's channels), or a ConfigError naming the file (a
    run's data is part of its config)."""
    try:
        return TrajectoryDataset(path, layout, fields=fields)
    except (DataFormatError, ValueError, OSError) as e:
        raise ConfigError(str(e) if str(e).startswith(str(path)) else f"{path}: {e}") from None


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


def select_model_fields(model: nn.Module, sources: list[TrajectoryDataset]) -> None:
    """A model that names its channels (``pretrained_cfg['fields']``, one per input channel) reads every
    file's channels by name, in its own order: a file in another order is reordered, one missing a field
    is refused naming it. Files of a model without names (or with fewer names than channels: channels
    padded for a mixture) are read as they are."""
    fields = list(getattr(model, "pretrained_cfg", {}).get("fields") or [])
    if fields and getattr(model.config, "in_channels", None) == len(fields):
        for src in sources:
            try:
                src.select_channels(fields)
            except DataFormatError as e:
                raise ConfigError(str(e)) from None


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
    select_model_fields(model, [src for _, tr, te in splits for src in (tr, te)])
    grid = choose_grid(model, [tr for _, tr, _ in splits], cfg.data.resolution, "data.resolution")
    resolution = grid.resolution
    for d, tr, te in splits:
        for src in (tr, te):
            if src.channels > channels:
                raise ConfigError(f"{src.path}: {src.channels} channels, more than the model's {channels}; "
                                  f"train a model with in_channels >= {src.channels}")
            if len(src.spatial) != len(resolution):
                raise ConfigError(f"{src.path}: {len(src.spatial)}-D data, but the run's resolution is {list(resolution)}")
    shape = frame_shape(model, resolution, channels)
    for d, tr, _ in splits:
        if tr.n_steps < mc.in_timesteps + mc.out_timesteps:
            raise ConfigError(f"{tr.path}: trajectories have {tr.n_steps} frames, fewer than "
                              f"T_in + T_out = {mc.in_timesteps + mc.out_timesteps}")
    test_frames = [check_frames(te, mc.in_timesteps, mc.out_timesteps, cfg.data.horizon, "data.horizon")
                   for _, _, te in splits]
    where = "data.resolution" if cfg.data.resolution else f"{splits[0][1].path} (the run's resolution)"
    check_resolution(model, shape.resolution, where)
    parts = [WindowDataset(tr, mc.in_timesteps, mc.out_timesteps, resolution=shape.resolution,
                           n_channels=channels, pad_value=shape.pad_value, dataset_index=k)
             for k, (d, tr, _) in enumerate(splits)]
    mixture = MixtureDataset(parts, [d.weight for d, _, _ in splits], names=[d.name for d, _, _ in splits])
    return RunData(shape, mixture, [(d.name, te) for d, _, te in splits], test_frames,
                   grid.line([src for _, tr, te in splits for src in (tr, te)], training=True))

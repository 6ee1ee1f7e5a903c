"""The one rule that fits data files to a model, for training, ``eval``, ``rollout`` and ``validate`` alike.

:func:`fit_data`: a model that names its fields reads every file's channels by name in its own order; the grid is the
one asked for, else the one the backbone asks for given the data, else the model's pretrained grid, else the first
file's (said in one line, :meth:`GridChoice.line`); every file must have the grid's number of dimensions; a model that
takes any channel count is brought to the files' own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from ..data import FrameShape, TrajectoryDataset
from ..data.errors import DataFormatError
from ..errors import ConfigError


@dataclass
class FittedData:
    """Data files fitted to a model (:func:`fit_data`)."""

    model: nn.Module  # brought to the files' channel count when it takes any, else the model given
    frame_shape: FrameShape  # the frames the model runs on: its grid, channels, steps and pad value
    grid: "GridChoice"  # the grid and why
    sources: list[TrajectoryDataset]
    fields: list[str] = field(default_factory=list)  # a line per file with fields it lacks, read filled


def fit_data(model: nn.Module, sources: list[TrajectoryDataset], resolution=None, flag: str = "--resolution",
             grid_from: list[TrajectoryDataset] | None = None, channels: int | None = None,
             adapt_channels: bool = True) -> FittedData:
    """Fit ``sources`` to ``model``: fields by name (:func:`select_model_fields`), the grid (:func:`choose_grid`, from
    ``grid_from`` or all the sources; ``resolution`` names one, ``flag`` says where from), the grid's number of
    dimensions, and (``adapt_channels``) a model that takes any channel count brought to the files' own. ``channels``:
    the frames' channel count (the model's by default). A file that does not fit is a ConfigError naming it."""
    fields = select_model_fields(model, sources)
    grid = choose_grid(model, grid_from or sources, resolution, flag)
    res = grid.resolution
    for src in sources:
        if len(src.spatial) != len(res):
            axes = "XYZ"[:len(src.spatial)]
            raise ConfigError(f"{src.path}: {len(src.spatial)}-D data {list(src.spatial)} (read as [N, "
                              f"{', '.join(axes)}, T, C]), but the model runs on {len(res)}-D grids {list(res)}; check "
                              f"the file's axis order (layout array:<axes>) or use a {len(src.spatial)}-D model")
    if adapt_channels:
        model = with_file_channels(model, sources)
    return FittedData(model, frame_shape(model, res, channels), grid, sources, fields)


def array_order_lines(paths, layout: str | None) -> list[str]:
    """A plain array carries no axis names: how each of ``paths`` is read, and how to read it otherwise (a line each)."""
    from ..data.readers.arrays import SUFFIXES

    lines = []
    for path in paths:
        if str(path).lower().endswith(SUFFIXES) and (layout or "array").partition(":")[0] == "array":
            src = open_trajectories(path, layout)
            axes = ["N", *"XYZ"[:len(src.spatial)], "T", "C"]
            how = src.source.info.axis_note or ("--layout " + layout if layout else "the canonical order")
            lines.append(f"data: {path} read as [{', '.join(axes)}] = {list(src.source.shape)} ({how}; another: "
                         f"--layout array:<axes>)")
    return lines


def fit_files(model: nn.Module, paths, resolution=None, layout: str | None = None, fields: list[str] | None = None,
              say=print) -> tuple[nn.Module, FrameShape, list[TrajectoryDataset]]:
    """``(model, frame shape, sources)``: the files ``paths`` opened and fitted to ``model`` (:func:`fit_data`); how a
    plain array is read and which grid is used are said first (``say``: a line at a time)."""
    for line in array_order_lines(paths, layout):
        say(line)
    fitted = fit_data(model, [open_trajectories(p, layout, fields) for p in paths], resolution)
    for line in fitted.fields:
        say(line)
    say(fitted.grid.line(fitted.sources))
    return fitted.model, fitted.frame_shape, fitted.sources


def with_file_channels(model: nn.Module, sources: list[TrajectoryDataset]) -> nn.Module:
    """A model that takes any number of channels (``takes_any_channel_count``) at the files' own count, not padded."""
    if not getattr(model, "takes_any_channel_count", False):
        return model
    wanted = max(src.channels for src in sources)
    if wanted == model.config.in_channels:
        return model
    from ..model_io.adapt import adapt_model

    return adapt_model(model, in_channels=wanted, out_channels=wanted).eval()


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


def select_model_fields(model: nn.Module, sources: list[TrajectoryDataset]) -> list[str]:
    """A model that names its channels (``pretrained_cfg['fields']``, one per input channel) reads every
    file's channels by name, in its own order: a file in another order is reordered, one missing a field
    is refused naming it, or, for a model trained with missing fields filled (``missing_field_value``), reads
    it as that value. Files of a model without names (or with fewer names than channels: channels
    padded for a mixture) are read as they are. Returns a line per file with filled fields, saying so."""
    fields = list(getattr(model, "pretrained_cfg", {}).get("fields") or [])
    fill = getattr(model, "missing_field_value", None)
    lines = []
    if fields and getattr(model.config, "in_channels", None) == len(fields):
        for src in sources:
            try:
                filled = src.select_channels(fields, fill)
            except DataFormatError as e:
                raise ConfigError(str(e)) from None
            if filled:
                name = getattr(model, "preset_name", None) or type(model).__name__
                lines.append(f"fields: {src.path} has no {', '.join(filled)}: read as {fill:g}, as {name} was trained "
                             "with missing fields")
    return lines
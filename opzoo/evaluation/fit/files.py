"""Files: opening a user's files for the fit, saying how a plain array is read, and the fit block as a command says
it (:func:`fit_files`)."""

from __future__ import annotations

from typing import Callable

from torch import nn

from ...data import FrameShape, TrajectoryDataset
from ...data.errors import DataFormatError
from ...errors import ConfigError
from .compose import FittedData, fit_data


def array_order_lines(paths, layout: str | None) -> list[str]:
    """A plain array carries no axis names: how each of ``paths`` is read, and how to read it otherwise (a line each)."""
    from ...data.readers.arrays import SUFFIXES

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
              say: Callable[[str], None] = print, *, field_map=None, training_set: str | None = None,
              test_fraction: float | None = None, name: str | None = None,
              keep_boundary: bool = False) -> tuple[nn.Module, FrameShape, list[TrajectoryDataset]]:
    """``(model, frame shape, sources)``: the files ``paths`` opened and fitted to ``model`` (:func:`fit_data`); how a
    plain array is read and the fit block are said first (``say``: a line at a time). Statistics a normalization needs
    come from each file's training part by training's rule (``test_fraction``, default 0.1). ``keep_boundary``: the
    user set the model's ``periodic`` flag (:func:`fit_data`)."""
    fitted = fit_files_block(model, paths, resolution, layout, fields, say, field_map=field_map,
                             training_set=training_set, test_fraction=test_fraction, name=name,
                             keep_boundary=keep_boundary)
    return fitted.model, fitted.frame_shape, fitted.sources


def fit_files_block(model: nn.Module, paths, resolution=None, layout: str | None = None,
                    fields: list[str] | None = None, say: Callable[[str], None] = print, *, field_map=None,
                    training_set: str | None = None, test_fraction: float | None = None,
                    name: str | None = None, keep_boundary: bool = False) -> FittedData:
    """:func:`fit_files`, returning the whole :class:`FittedData` (its block and record too)."""
    from ...data.datasets import split_trajectories

    for line in array_order_lines(paths, layout):
        say(line)
    sources = [open_trajectories(p, layout, fields) for p in paths]
    parts = None
    if test_fraction is not None:
        parts = []
        for s in sources:
            try:
                parts.append(split_trajectories(s, test_fraction)[0])
            except DataFormatError as e:
                raise ConfigError(str(e)) from None
    fitted = fit_data(model, sources, resolution, field_map=field_map, training_set=training_set, stats_from=parts,
                      name=name, keep_boundary=keep_boundary)
    say_block(fitted, say)
    return fitted


def say_block(fitted: FittedData, say: Callable[[str], None] = print) -> None:
    """The fit block: a header line and one line per decision."""
    files = ", ".join(dict.fromkeys(s.path for s in fitted.sources))
    say(f"fit of {fitted.record.get('model')} to {files} (docs/data-contract.md):")
    for line in fitted.lines:
        say("  " + line)


def with_file_channels(model: nn.Module, sources: list[TrajectoryDataset]) -> nn.Module:
    """A model that takes any number of channels (its contract's ``other_fields="any"``) at the files' own count."""
    return fit_data(model, sources).model


def open_trajectories(path: str, layout: str | None = None, fields: list[str] | None = None) -> TrajectoryDataset:
    """A file's trajectories (``fields``: the names of a plain array's channels), or a ConfigError naming the file (a
    run's data is part of its config)."""
    try:
        return TrajectoryDataset(path, layout, fields=fields)
    except (DataFormatError, ValueError, OSError) as e:
        text = str(e) or type(e).__name__
        raise ConfigError(text if text.startswith(str(path)) else f"{path}: {text}") from None


__all__ = ["array_order_lines", "fit_files", "fit_files_block", "open_trajectories", "say_block", "with_file_channels"]

"""The grid: the one rule for the grid data is brought to (:func:`choose_grid`) and the frames a model takes at it
(:func:`frame_shape`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ...data import FrameShape, TrajectoryDataset
from ...registry.contract import DataContract
from .contract import contract_of, pad_value_of


def model_resolution(model: nn.Module) -> tuple[int, ...] | None:
    """The grid a model is built for (its config's ``img_size``: the grid of its position table), else the one it
    was pretrained at (``pretrained_cfg['resolution']``), if it says."""
    img = getattr(model.config, "img_size", None)
    dims = getattr(model.config, "spatial_dims", 2)
    res = [img] * dims if isinstance(img, int) else list(img) if isinstance(img, (list, tuple)) else None
    if res is None:
        res = getattr(model, "pretrained_cfg", {}).get("resolution")
    return tuple(int(r) for r in res) if res else None


@dataclass
class GridChoice:
    """The grid a model runs data at, and why (said to the user before any data is resampled)."""

    resolution: tuple[int, ...]
    why: str
    resampled: bool  # some file is not at ``resolution``: it is interpolated

    def line(self, sources: list[TrajectoryDataset], training: bool = False, mode: str = "bilinear",
             source: str = "") -> str:
        """What a command says before it reads data (``mode``: how it is resampled, ``source``: whose way that is)."""
        text = "x".join(map(str, self.resolution))
        turned = sorted({"x".join(map(str, s.source.file_spatial)) for s in sources if s.source.transposed})
        said = (f"; the file's own {', '.join(turned)} grid is read transposed, as the model's upstream read it, and "
                f"saved predictions and plots are turned back" if turned else "")
        if not self.resampled:
            return f"grid: {text}, the data's own ({self.why}){said}"
        files = ", ".join(sorted({"x".join(map(str, s.source.file_spatial)) for s in sources}))
        how = f"{mode}{', ' + source if source else ''}"
        trains = "training frames are resampled to it; " if training else ""
        return (f"grid: the model runs at {text} ({self.why}); {trains}inputs are resampled to it ({how}) and "
                f"predictions back: scores are computed at the file's own grid ({files}){said}")


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
            if pretrained:
                patch = getattr(model.config, "patch_size", 1)
                patch = list(patch)[-len(first):] if isinstance(patch, (list, tuple)) else [patch] * len(first)
                own = [-(-n // p) * p for n, p in zip(first, patch)]  # the file's grid, in whole patches
                said = "the file's own" if tuple(own) == first else "the file's own, in whole patches"
                grid, why = pretrained, (f"the model's pretrained grid; {flag} {' '.join(map(str, own))} runs it at "
                                         f"{said}" if len(pretrained) == len(first) and tuple(own) != pretrained else
                                         "the model's pretrained grid")
            else:
                grid, why = first, "the first file's"
    return GridChoice(tuple(grid), why, any(tuple(s.spatial) != tuple(grid) for s in sources))


def frame_shape(model: nn.Module, resolution: tuple[int, ...], channels: int | None = None,
                contract: DataContract | None = None) -> FrameShape:
    """The frames ``model`` takes at ``resolution``: its channels (padded with its contract's pad value) and how data
    is resampled to it."""
    c, contract = model.config, contract or contract_of(model)
    return FrameShape(tuple(resolution), channels or c.in_channels, c.in_timesteps, c.out_timesteps,
                      pad_value_of(model, contract), contract.resample)


__all__ = ["GridChoice", "choose_grid", "frame_shape", "model_resolution"]

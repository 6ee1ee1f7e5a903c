"""Shape unification (DPOT preprocessing): spatial resize and channel padding, and the frame shape a model takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from opzoo.data.errors import DataFormatError

_MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}
RESAMPLE = ("bilinear", "bicubic")  # linear on 1-D and 3-D grids; bicubic: 2-D grids only (GPhyT's preprocessing)


def as_size(resolution: int | Sequence[int], n_dims: int) -> tuple[int, ...]:
    """``128`` -> ``(128, 128)`` for 2 dims; a sequence is checked against ``n_dims``."""
    if isinstance(resolution, int):
        return (resolution,) * n_dims
    size = tuple(int(r) for r in resolution)
    if len(size) != n_dims:
        raise ValueError(f"resolution {size} has {len(size)} dims; the data have {n_dims} spatial dims")
    return size


def resize(frames: torch.Tensor, size: Sequence[int], mode: str = "bilinear") -> torch.Tensor:
    """``[*S, T, C]`` -> ``[*size, T, C]`` by (bi/tri)linear interpolation (``mode="bicubic"``: bicubic, for 2-D
    grids), ``align_corners=False``.

    The identity when ``S == size``. Interpolation runs in float32 at least.
    """
    *spatial, steps, channels = frames.shape
    size = tuple(size)
    if tuple(spatial) == size:
        return frames
    d = len(spatial)
    x = frames.reshape(*spatial, steps * channels).movedim(-1, 0)[None]  # [1, T*C, *S]
    if not x.is_floating_point() or x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if mode not in RESAMPLE:
        raise ValueError(f"resample mode {mode!r}: one of {', '.join(RESAMPLE)}")
    if mode == "bicubic" and d != 2:
        raise ValueError(f"bicubic resampling is for 2-D grids, not {d}-D {list(spatial)}")
    y = F.interpolate(x, size=size, mode=_MODES[d] if mode == "bilinear" else mode, align_corners=False)
    return y[0].movedim(0, -1).reshape(*size, steps, channels)


def resize_batch(frames: torch.Tensor, size: Sequence[int], mode: str = "bilinear") -> torch.Tensor:
    """``[B, *S, T, C]`` -> ``[B, *size, T, C]``, each sample as :func:`resize` (the identity when ``S == size``)."""
    size = tuple(size)
    if tuple(frames.shape[1:-2]) == size:
        return frames
    return torch.stack([resize(f, size, mode) for f in frames]).to(frames.dtype)


def pad_channels(frames: torch.Tensor, n_channels: int, value: float = 1.0,
                 present: Sequence[bool] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``[*S, T, C]`` -> (``[*S, T, n_channels]`` padded with ``value``, mask ``[n_channels]`` bool).

    ``mask[c]`` is True for the channels that hold data and False for padding and for the channels ``present`` (one
    flag per data channel) marks as filled (a field the file lacks, read as a fill value).
    """
    channels = frames.shape[-1]
    if channels > n_channels:
        raise ValueError(f"data have {channels} channels, more than n_channels = {n_channels}")
    mask = torch.zeros(n_channels, dtype=torch.bool)
    mask[:channels] = True if present is None else torch.tensor(list(present), dtype=torch.bool)
    if channels == n_channels:
        return frames, mask
    pad = frames.new_full((*frames.shape[:-1], n_channels - channels), value)
    return torch.cat([frames, pad], dim=-1), mask


@dataclass
class FrameShape:
    """The frames a model takes: spatial ``resolution``, ``channels`` (a file's are padded, with a mask),
    ``in_timesteps`` and ``out_timesteps``."""

    resolution: tuple[int, ...]
    channels: int
    in_timesteps: int
    out_timesteps: int = 1
    pad_value: float = 1.0  # what fills the channels the data lacks (its contract's pad value)
    resample: str = "bilinear"  # how frames are brought to ``resolution`` (its contract's: bilinear or bicubic)

    def at(self, resolution: Sequence[int]) -> "FrameShape":
        """The same frames at another grid (e.g. a file's own, where scores are computed)."""
        return FrameShape(tuple(resolution), self.channels, self.in_timesteps, self.out_timesteps, self.pad_value,
                          self.resample)

    def frames(self, x: torch.Tensor, present: Sequence[bool] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``[*S, T, C]`` -> (``[*resolution, T, channels]``, mask ``[channels]`` bool; ``present``: which data
        channels hold data, not a fill value)."""
        x = resize(x, self.resolution, self.resample)
        if x.shape[-1] > self.channels:
            raise DataFormatError(f"data has {x.shape[-1]} channels but the model takes {self.channels}")
        return pad_channels(x, self.channels, self.pad_value, present)

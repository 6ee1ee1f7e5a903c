"""A lab's own trajectory format, read by opzoo through this plugin (``registry.register_reader``), and a metric of
the lab's (``registry.register_metric``): what docs/plugins.md walks through.

A ``.labtraj`` file is the magic ``LABTRAJ1``, one line of JSON (``{"shape": [N, T, C, H, W], "fields": [...]}``),
then the values as little-endian float32 in that order: each frame channels-first, as the lab's solver writes them.
"""

from __future__ import annotations

import json

import numpy as np

import opzoo
from opzoo.data import DataFormatError, SourceInfo, TrajectorySource

MAGIC = b"LABTRAJ1"


def write_labtraj(path, data: np.ndarray, fields: list[str]) -> None:
    """Write ``data [N, T, C, H, W]`` as a ``.labtraj`` file."""
    header = json.dumps({"shape": list(data.shape), "fields": list(fields)}).encode() + b"\n"
    with open(path, "wb") as f:
        f.write(MAGIC + header)
        f.write(np.ascontiguousarray(data, dtype="<f4").tobytes())


class LabTrajSource(TrajectorySource):
    """``.labtraj`` files as opzoo's ``N`` trajectories ``[H, W, T, C]``."""

    layout = "lab-traj"
    suffixes = (".labtraj",)
    expects = "a .labtraj file: LABTRAJ1, a JSON line {shape: [N, T, C, H, W], fields}, then float32 values"

    @classmethod
    def detect(cls, f) -> bool:  # told by its suffix, never from an HDF5 handle
        return False

    def _h5(self):  # the open "file" of this format: a read-only memory map of its values
        if self._file is None:
            with open(self.path, "rb") as f:
                if f.read(len(MAGIC)) != MAGIC:
                    raise DataFormatError(f"{self.path}: not a .labtraj file (no LABTRAJ1 at its start)")
                line = f.readline(4096)
                offset = f.tell()
            try:
                header = json.loads(line)
                shape, self.file_fields = [int(n) for n in header["shape"]], list(header["fields"])
            except (ValueError, KeyError, TypeError) as e:
                raise DataFormatError(f"{self.path}: its header line is not {{shape, fields}} JSON ({e})") from None
            if len(shape) != 5 or len(self.file_fields) != shape[2]:
                raise DataFormatError(f"{self.path}: shape {shape} is not [N, T, C, H, W] with one field per channel")
            self._file = np.memmap(self.path, dtype="<f4", mode="r", offset=offset, shape=tuple(shape))
        return self._file

    def close(self) -> None:
        self._file = None

    def _validate(self, values) -> SourceInfo:
        n, t, _, h, w = values.shape
        return SourceInfo(layout=self.layout, n_samples=n, spatial_shape=(h, w), n_steps=t, fields=self.file_fields,
                          axis_note="[N, T, C, H, W] as the lab's solver writes every .labtraj file")

    def _read(self, values, sample: int, t_start: int, t_stop: int) -> np.ndarray:
        return np.asarray(values[sample, t_start:t_stop]).transpose(2, 3, 0, 1)  # [t, C, H, W] -> [H, W, t, C]


def _mean_absolute(pred, truth, lengths):
    """Each trajectory's mean absolute error over grid, steps and channels: ``[B]``."""
    return (pred - truth).abs().flatten(1).mean(1)


MAE = opzoo.Metric("MAE", _mean_absolute, description="mean absolute error over grid, steps and channels")

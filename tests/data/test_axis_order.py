"""Files read as their coordinates say (issue 45): a layout whose axis order is assumed (PDEBench's ``tensor``
``[N, T, *S]``, the canonical ``data`` ``[N, *S, T, C]``) is checked against the file's own time and space coordinates;
where nothing in the file decides the order, it is refused as plain arrays are, listing each reading and its flag."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from opzoo.cli import main
from opzoo.data import open_source
from opzoo.data.errors import DataFormatError


def wave_file(path, order="NXYT", coords=True, n=3, x=16, y=16, t=7, t_points=None):
    """A linear wave stored in ``order``: u(x, y, t) = sin(2 pi (x - c t)), so time and space are told apart."""
    xs, ys, ts = np.linspace(0, 1, x, endpoint=False), np.linspace(0, 1, y, endpoint=False), np.linspace(0, 1, t)
    c = np.arange(1, n + 1)[:, None, None, None]
    u = np.sin(2 * np.pi * (xs[None, :, None, None] - 0.3 * c * ts[None, None, None, :])) + 0 * ys[None, None, :, None]
    stored = np.transpose(u, ["NXYT".index(a) for a in order]).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["tensor"] = stored
        if coords:
            f["t-coordinate"] = np.linspace(0, 1, t_points or t)
            f["x-coordinate"], f["y-coordinate"] = xs, ys
    return path, u.astype(np.float32)  # [N, X, Y, T]


def test_a_time_last_tensor_with_coordinates_is_read_as_they_say(tmp_path, capsys):
    """The reported case: tensor [N, X, Y, T] with a 21-value t-coordinate and a 64-point y-coordinate was read as
    [N, T=X, X=Y, Y=T], and `data inspect` printed "T = 64 frames" beside "coord y: 64 points"."""
    path, u = wave_file(tmp_path / "wave.h5", "NXYT", x=64, y=64, t=21)
    source = open_source(path)
    assert source.axes == "NXYT" and source.info.shape == (3, 64, 64, 21, 1)
    np.testing.assert_array_equal(source.read(1)[..., 0], u[1])  # [X, Y, T]
    assert main(["data", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "T = 21 frames" in out and "stored as [N, X, Y, T], as its coordinates" in out


def test_the_pdebench_order_is_confirmed_by_its_coordinates(tmp_path):
    path, u = wave_file(tmp_path / "pdebench.h5", "NTXY", t=7, t_points=8)  # PDEBench CFD-style T + 1 edges
    source = open_source(path)
    assert source.axes == "NTXY" and "confirm" in source.info.axis_note
    np.testing.assert_array_equal(source.read(0)[..., 0], u[0])


def test_without_coordinates_every_reading_is_listed_and_none_is_guessed(tmp_path):
    path, u = wave_file(tmp_path / "bare.h5", "NXYT", coords=False, t=7)
    with pytest.raises(DataFormatError) as e:
        open_source(path)
    msg = str(e.value)
    assert "does not say which axis is which" in msg and "\n" not in msg
    for order in ("NTXY", "NXTY", "NXYT"):
        assert f"--layout pdebench-tensor:{order}" in msg
    named = open_source(path, layout="pdebench-tensor:NXYT")
    np.testing.assert_array_equal(named.read(2)[..., 0], u[2])
    assert main(["data", "inspect", str(path), "--layout", "pdebench-tensor:NXYT"]) == 0


def test_coordinates_that_fit_no_reading_or_several_are_refused(tmp_path):
    path, _ = wave_file(tmp_path / "bad.h5", "NXYT", t=7, t_points=5)  # 5 times: no axis has 5 or 4 entries
    with pytest.raises(DataFormatError, match="fit no reading"):
        open_source(path)
    square, _ = wave_file(tmp_path / "square.h5", "NXYT", x=8, y=8, t=8)  # every axis 8 long
    with pytest.raises(DataFormatError, match="fit more than one reading.*pdebench-tensor:NTXY"):
        open_source(square)
    path, _ = wave_file(tmp_path / "named.h5", "NXYT", t=7)
    with pytest.raises(DataFormatError, match=r"read as \[N, T, X, Y\] contradicts its coordinates"):
        open_source(path, layout="pdebench-tensor:NTXY")


def test_a_canonical_file_is_checked_against_its_time_and_coordinate_attributes(tmp_path):
    """A 'data' [N, T, X, Y, C] without an 'axes' attribute whose 'time' attribute has T entries: read as stated by
    the attributes, not as [N, X, Y, T, C]."""
    data = np.random.default_rng(0).standard_normal((2, 5, 12, 12, 1)).astype(np.float32)  # [N, T, X, Y, C]
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f["data"] = data
        f.attrs["time"] = np.arange(5.0)
        f.attrs["coord_x"] = np.arange(12.0)
        f.attrs["coord_y"] = np.arange(12.0)
    source = open_source(tmp_path / "c.h5")
    assert source.axes == "NTXYC" and source.info.shape == (2, 12, 12, 5, 1)
    np.testing.assert_array_equal(source.read(1), np.moveaxis(data[1], 0, -2))

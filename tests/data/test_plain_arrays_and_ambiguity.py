"""Layout detection never guesses (issue 27), and plain arrays (.npy, .npz, tensor-only .pt) are read in the
order named by ``array:<axes>`` or by the file's own ``axes`` entry, never in a guessed one (issue 35)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from opzoo.cli import main
from opzoo.data import open_source
from opzoo.data.errors import DataFormatError, UnknownLayoutError


@pytest.fixture
def trajectories():
    return np.random.default_rng(0).standard_normal((3, 8, 6, 5, 2)).astype(np.float32)  # [N, X, Y, T, C]


def test_a_lone_u_is_refused_with_the_candidates_and_the_layout_option(tmp_path):
    path = tmp_path / "brusselator.h5"  # the user's [N, X, Y, T, C] under a generic key
    with h5py.File(path, "w") as f:
        f["u"] = np.zeros((48, 32, 32, 30, 2), np.float32)
    with pytest.raises(UnknownLayoutError) as info:
        open_source(path)
    message = str(info.value)
    assert str(path) in message and "'u' [48, 32, 32, 30, 2]" in message
    assert "N=2, X=30, Y=32, Z=32, T=48, C=1" in message  # what the guess would have been
    assert "fno-mat:" in message and "array:<axes>" in message
    assert "--layout NAME" in message and "layout: NAME" in message
    # named explicitly, the layout is used as asked
    assert open_source(path, layout="fno-mat").shape == (2, 30, 32, 32, 48, 1)


def test_an_fno_file_with_its_own_keys_is_still_detected(tmp_path):
    path = tmp_path / "ns.h5"
    with h5py.File(path, "w") as f:
        f["u"] = np.zeros((5, 8, 8, 3), np.float32)
        f["t"] = np.arange(5, dtype=np.float32)[:, None]
    assert open_source(path).layout == "fno-mat"


def test_npy_is_read_in_the_stated_order_lazily(tmp_path, trajectories):
    path = tmp_path / "u.npy"
    np.save(path, trajectories)
    src = open_source(path, layout="array:NXYTC")
    assert src.layout == "array" and src.shape == (3, 8, 6, 5, 2) and src.fields == ["c0", "c1"]
    np.testing.assert_array_equal(src.read(1, 2, 4), trajectories[1, :, :, 2:4, :])
    assert isinstance(src._h5(), np.memmap)


def test_an_array_of_unstated_order_is_refused_with_every_plausible_reading(tmp_path, trajectories):
    """A 5-D [N, T, X, Y, C] array used to be read as [N, X, Y, T, C] without a word."""
    path = tmp_path / "ks.npy"
    saved_as = np.transpose(trajectories, (0, 3, 1, 2, 4))  # [N, T, X, Y, C] = [3, 5, 8, 6, 2]
    np.save(path, saved_as)
    with pytest.raises(DataFormatError) as info:
        open_source(path)
    message = str(info.value)
    assert "does not guess" in message
    assert "--layout array:NTXYC (N=3, T=5, X=8, Y=6, C=2)" in message and "\n" not in message
    assert "--layout array:NXYTC (N=3, X=5, Y=8, T=6, C=2)" in message
    assert "--layout array:NTXYZ" in message and "one channel, added)" in message
    np.testing.assert_array_equal(open_source(path, layout="array:NTXYC").read(0), trajectories[0])


def test_a_missing_channel_axis_can_be_stated_and_is_added(tmp_path, trajectories):
    path = tmp_path / "u.npy"
    np.save(path, np.transpose(trajectories[..., 0], (0, 3, 1, 2)))  # [N, T, X, Y], no channel axis
    src = open_source(path, layout="array:NTXY")
    assert src.shape == (3, 8, 6, 5, 1) and src.fields == ["c0"]
    np.testing.assert_array_equal(src.read(2)[..., 0], trajectories[2, ..., 0])


def test_a_file_may_carry_its_axis_names(tmp_path, trajectories):
    npz = tmp_path / "u.npz"
    np.savez(npz, data=np.transpose(trajectories, (0, 3, 1, 2, 4)), axes="NTXYC")
    np.testing.assert_array_equal(open_source(npz).read(1), trajectories[1])
    pt = tmp_path / "u.pt"
    torch.save({"data": torch.from_numpy(np.transpose(trajectories, (0, 3, 1, 2, 4))), "axes": "NTXYC"}, pt)
    np.testing.assert_array_equal(open_source(pt).read(1), trajectories[1])
    with pytest.raises(DataFormatError, match="contradicts the file's own 'axes' entry 'NTXYC'"):
        open_source(npz, layout="array:NXYTC")
    h5 = tmp_path / "u.h5"  # the canonical HDF5 layout with the order in the dataset's attribute 'axes'
    with h5py.File(h5, "w") as f:
        f["data"] = np.transpose(trajectories, (0, 3, 1, 2, 4))
        f["data"].attrs["axes"] = "NTXYC"
        f.attrs["fields"] = ["u", "v"]
    src = open_source(h5)
    assert src.shape == (3, 8, 6, 5, 2) and src.fields == ["u", "v"]
    np.testing.assert_array_equal(src.read(1, 1, 3), trajectories[1, :, :, 1:3])


def test_another_axis_order_is_named_in_the_layout(tmp_path, trajectories):
    path = tmp_path / "u.npz"
    np.savez(path, data=np.transpose(trajectories, (0, 3, 1, 2, 4)))  # [N, T, X, Y, C]
    src = open_source(path, layout="array:NTXYC")
    assert src.shape == (3, 8, 6, 5, 2)
    np.testing.assert_array_equal(src.read(2), trajectories[2])
    with pytest.raises(DataFormatError, match="each once"):
        open_source(path, layout="array:NTXXC")


def test_tensor_only_pt_is_read_with_weights_only(tmp_path, trajectories):
    path = tmp_path / "u.pt"
    torch.save({"data": torch.from_numpy(trajectories)}, path)
    np.testing.assert_array_equal(open_source(path, layout="array:NXYTC").read(0), trajectories[0])
    bad = tmp_path / "obj.pt"
    torch.save({"data": torch.zeros(2), "what": object()}, bad)  # needs unpickling code: refused
    with pytest.raises(DataFormatError, match="cannot be read as a plain .pt array"):
        open_source(bad)


def test_opzoo_data_inspect_reads_npy(tmp_path, trajectories, capsys):
    path = tmp_path / "u.npy"
    np.save(path, trajectories)
    assert main(["data", "inspect", str(path), "--layout", "array:NXYTC"]) == 0
    out = capsys.readouterr().out
    assert "array" in out and "3" in out

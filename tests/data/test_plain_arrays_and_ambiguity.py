"""Layout detection never guesses (issue 27), and plain arrays (.npy, .npz, tensor-only .pt) are read in
the canonical order ``[N, *S, T, C]`` or an order named by ``array:<axes>``."""

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


def test_npy_is_read_in_canonical_order_lazily(tmp_path, trajectories):
    path = tmp_path / "u.npy"
    np.save(path, trajectories)
    src = open_source(path)
    assert src.layout == "array" and src.shape == (3, 8, 6, 5, 2) and src.fields == ["c0", "c1"]
    np.testing.assert_array_equal(src.read(1, 2, 4), trajectories[1, :, :, 2:4, :])
    assert isinstance(src._h5(), np.memmap)


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
    np.testing.assert_array_equal(open_source(path).read(0), trajectories[0])
    bad = tmp_path / "obj.pt"
    torch.save({"data": torch.zeros(2), "what": object()}, bad)  # needs unpickling code: refused
    with pytest.raises(DataFormatError, match="cannot be read as a plain .pt array"):
        open_source(bad)


def test_opzoo_data_inspect_reads_npy(tmp_path, trajectories, capsys):
    path = tmp_path / "u.npy"
    np.save(path, trajectories)
    assert main(["data", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "array" in out and "3" in out

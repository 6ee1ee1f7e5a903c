"""The canonical writer: attributes, chunking, atomic replacement."""

import json
import os

import h5py
import numpy as np
import pytest

from opzoo.data import CanonicalWriter, write_canonical
from opzoo.data.canonical import CHUNK_BYTES, chunk_shape


def test_attributes_and_chunks(tmp_path):
    path = tmp_path / "c.h5"
    with CanonicalWriter(path, 3, (64, 32), 40, ["u", "v"], pde="heat", params={"nu": 0.1, "res": np.int64(64)},
                         dt=0.25, times=0.25 * np.arange(40), coords={"x": np.arange(64), "y": np.arange(32)},
                         generator="g", generator_version="2", seed=5) as writer:
        writer.append(np.ones((2, 64, 32, 40, 2)))
        writer.append(np.zeros((1, 64, 32, 40, 2)))
    with h5py.File(path) as f:
        ds = f["data"]
        assert ds.shape == (3, 64, 32, 40, 2) and ds.dtype == np.float32
        assert ds.chunks[:3] == (1, 64, 32) and ds.chunks[-1] == 2
        assert 4 * np.prod(ds.chunks) <= CHUNK_BYTES
        assert list(f.attrs["fields"]) == ["u", "v"] and f.attrs["pde"] == "heat" and f.attrs["dt"] == 0.25
        assert json.loads(f.attrs["params"]) == {"nu": 0.1, "res": 64}
        assert f.attrs["generator"] == "g" and f.attrs["generator_version"] == "2" and f.attrs["seed"] == 5
        assert list(f.attrs["spatial_dims"]) == ["x", "y"] and len(f.attrs["coord_y"]) == 32
        assert ds[0].min() == 1 and ds[2].max() == 0


def test_chunk_shape_for_large_frames():
    assert chunk_shape((512, 512), 100, 4) == (1, 512, 512, 1, 4)  # one 4 MiB frame
    assert chunk_shape((8,), 5, 1) == (1, 8, 5, 1)


def test_replaces_atomically_and_rejects_bad_blocks(tmp_path):
    path = tmp_path / "c.h5"
    write_canonical(path, np.zeros((1, 4, 2, 1)), ["u"])
    before = os.path.getmtime(path)
    with pytest.raises(Exception, match=r"block shaped \[1, 5, 2, 1\], expected \[B, 4, 2, 1\]"):
        with CanonicalWriter(path, 1, (4,), 2, ["u"]) as w:
            w.append(np.zeros((1, 5, 2, 1)))
    assert os.path.getmtime(path) == before and os.listdir(tmp_path) == ["c.h5"]
    with pytest.raises(Exception, match="exceeds N = 1"):
        with CanonicalWriter(path, 1, (4,), 2, ["u"]) as w:
            w.append(np.zeros((2, 4, 2, 1)))
    assert os.listdir(tmp_path) == ["c.h5"]

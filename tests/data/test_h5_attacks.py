"""HDF5 files that reach outside themselves or would serve fill values are refused before any read, naming
the dataset (issue 34: F3, F7, F8, D6, D7, D9); a file changed under a reader stops it."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from opzoo.data import open_source
from opzoo.data.errors import DataFormatError

GOOD = np.random.default_rng(0).standard_normal((4, 8, 8, 5, 1)).astype(np.float32)


def canonical(path, **create) -> str:
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=GOOD, **create)
        f.attrs["fields"] = ["u"]
    return str(path)


def refused(path, *words):
    with pytest.raises(DataFormatError) as info:
        open_source(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    for w in words:
        assert w in message, message
    return message


def test_external_raw_storage_is_not_read(tmp_path):
    """F7: an `external=[('/etc/passwd', ...)]` dataset read the passwd bytes in as data."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(os.urandom(GOOD.nbytes))
    path = tmp_path / "ext.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", shape=GOOD.shape, dtype="f4", external=[(str(secret), 0, GOOD.nbytes)])
    refused(path, "'data' keeps its raw data in the external file", str(secret))


def test_external_links_are_not_followed(tmp_path):
    other = canonical(tmp_path / "other.h5")
    path = tmp_path / "link.h5"
    with h5py.File(path, "w") as f:
        f["data"] = h5py.ExternalLink(other, "/data")
    refused(path, "'data' is an external link to", "other.h5:/data")
    missing = tmp_path / "dangling.h5"  # D6: a missing external link
    with h5py.File(missing, "w") as f:
        f["data"] = h5py.ExternalLink(str(tmp_path / "gone.h5"), "/data")
    refused(missing, "external link")


def test_virtual_datasets_are_refused_even_when_their_source_is_missing(tmp_path):
    """F8: a virtual dataset whose source file is missing read fill zeros."""
    source = canonical(tmp_path / "source.h5")
    layout = h5py.VirtualLayout(shape=GOOD.shape, dtype="f4")
    layout[:] = h5py.VirtualSource(source, "data", shape=GOOD.shape)
    path = tmp_path / "vds.h5"
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("data", layout, fillvalue=0)
    os.remove(source)
    refused(path, "'data' is virtual", "source.h5")


def test_soft_link_loops_and_dangling_links(tmp_path):
    path = tmp_path / "loop.h5"
    with h5py.File(path, "w") as f:
        canonical_group = f.create_group("g")
        canonical_group["self"] = h5py.SoftLink("/g")
    refused(path, "makes a loop")
    path = tmp_path / "dangling.h5"
    with h5py.File(path, "w") as f:
        f["data"] = h5py.SoftLink("/nothing")
    refused(path, "points to '/nothing', which does not exist")


def test_unwritten_storage_and_truncated_files_are_refused(tmp_path):
    """F3 and D9: storage never written (or cut off) would read as fill zeros."""
    path = tmp_path / "declared.h5"  # an 8 KB file declaring a huge dataset
    with h5py.File(path, "w") as f:
        f.create_dataset("data", shape=(1_000_000, 1024, 1024, 20, 1), dtype="f4", chunks=(1, 64, 64, 20, 1))
    assert os.path.getsize(path) < 20_000
    refused(path, "chunks stored", "fill values")
    path = tmp_path / "contiguous.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", shape=GOOD.shape, dtype="f4")  # never written
    refused(path, "stores none of them")
    full = canonical(tmp_path / "full.h5")
    with open(full, "rb") as src, open(tmp_path / "cut.h5", "wb") as dst:
        dst.write(src.read(os.path.getsize(full) - 2000))
    with pytest.raises(DataFormatError, match="truncated"):
        open_source(tmp_path / "cut.h5")
    chunked = canonical(tmp_path / "chunked.h5", chunks=(1, 8, 8, 5, 1))
    with open(chunked, "r+b") as f:
        f.truncate(os.path.getsize(chunked) - 1500)
    with pytest.raises(DataFormatError, match="truncated"):
        open_source(chunked)


def test_complex_string_and_empty_data_are_refused_with_a_reason(tmp_path):
    """D6, D7: complex data used to lose its imaginary part silently; strings and zero-size axes tracebacked."""
    for name, data, words in (("complex", GOOD.astype(np.complex64), "complex values"),
                              ("empty", np.zeros((0, 8, 8, 5, 1), np.float32), "an axis of size 0")):
        path = tmp_path / f"{name}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=data)
        refused(path, words)
    path = tmp_path / "strings.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.array([[["a"] * 5] * 4] * 4, dtype=h5py.string_dtype()))
    with pytest.raises(DataFormatError):
        open_source(path)


def test_a_file_changed_under_a_reader_stops_it(tmp_path):
    path = canonical(tmp_path / "live.h5")
    src = open_source(path)
    np.testing.assert_array_equal(src.read(0), GOOD[0])
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(DataFormatError, match="the file changed while it was being read"):
        src.read(1)

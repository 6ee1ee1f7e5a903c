"""Bad files give clear errors naming file, key and expected shape; generators never leave a
half-written file."""

import os

import h5py
import numpy as np
import pytest
import torch

from opzoo.data import (
    CanonicalWriter,
    DataFormatError,
    GeneratorError,
    NonFiniteDataError,
    WindowDataset,
    generate,
    open_source,
    write_canonical,
)
from opzoo.data.generators import NavierStokes2D, generate_to_file
from tests.data.foreign_layouts import write_pdebench_cfd, write_pdebench_groups


def _canonical(tmp_path, n=3, t=8, name="c.h5"):
    data = np.random.default_rng(0).standard_normal((n, 4, 5, t, 2)).astype(np.float32)
    write_canonical(tmp_path / name, data, ["u", "v"])
    return tmp_path / name, data


def test_missing_key_names_file_key_and_expected_shape(tmp_path):
    data = np.zeros((2, 4, 4, 3, 4), np.float32)
    path = tmp_path / "cfd.h5"
    write_pdebench_cfd(path, data)
    with h5py.File(path, "a") as f:
        del f["pressure"]
    with pytest.raises(DataFormatError) as info:
        open_source(path)
    message = str(info.value)
    assert str(path) in message and "'pressure' is missing" in message and "[N, T, X, Y]" in message
    assert "Found keys" in message and "'density'" in message


def test_wrong_rank(tmp_path):
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.zeros((2, 8, 3), np.float32)
    with pytest.raises(DataFormatError) as info:
        open_source(path)
    message = str(info.value)
    assert str(path) in message and "'data'" in message and "[2, 8, 3]" in message and "[N, *S, T, C]" in message


def test_inconsistent_field_shape(tmp_path):
    path = tmp_path / "cfd.h5"
    write_pdebench_cfd(path, np.zeros((2, 4, 4, 3, 4), np.float32))
    with h5py.File(path, "a") as f:
        del f["Vy"]
        f["Vy"] = np.zeros((2, 3, 4, 5), np.float32)
    with pytest.raises(DataFormatError, match=r"key 'Vy' has shape \[2, 3, 4, 5\]; expected \[2, 3, 4, 4\]"):
        open_source(path)


def test_inconsistent_sample_group(tmp_path):
    path = tmp_path / "swe.h5"
    write_pdebench_groups(path, np.zeros((3, 4, 4, 5, 1), np.float32))
    with h5py.File(path, "a") as f:
        del f["0002/data"]
        f["0002/data"] = np.zeros((4, 4, 4, 1), np.float32)
    with pytest.raises(DataFormatError, match=r"'0002/data' has shape \[4, 4, 4, 1\]; expected \[5, 4, 4, 1\]"):
        open_source(path)


def test_fields_attribute_disagrees_with_channels(tmp_path):
    path, _ = _canonical(tmp_path)
    with h5py.File(path, "a") as f:
        f.attrs["fields"] = ["u", "v", "p"]
    with pytest.raises(DataFormatError, match="C = 2 channels .* names 3"):
        open_source(path)


def test_truncated_file(tmp_path):
    path, _ = _canonical(tmp_path, n=20)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    with pytest.raises(DataFormatError) as info:
        src = open_source(path)
        for i in range(20):
            src.read(i)
    assert str(path) in str(info.value) and "truncated" in str(info.value)


def test_corrupt_file(tmp_path):
    path, _ = _canonical(tmp_path)
    with open(path, "r+b") as f:
        f.write(b"\x00" * 64)  # destroy the superblock signature
    with pytest.raises(DataFormatError, match="cannot be opened as HDF5"):
        open_source(path)


def test_not_hdf5_and_matlab_v5(tmp_path):
    text = tmp_path / "notes.h5"
    text.write_text("hello")
    with pytest.raises(DataFormatError, match=r"notes.h5: cannot be opened as HDF5"):
        open_source(text)
    mat = tmp_path / "burgers_data_R10.mat"
    mat.write_bytes(b"MATLAB 5.0 MAT-file, Platform: GLNXA64".ljust(256, b" "))
    with pytest.raises(DataFormatError, match="MATLAB v5 .mat file"):
        open_source(mat)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="nowhere.h5"):
        open_source("/nonexistent/nowhere.h5")


def test_nan_frames_raise_with_file_key_sample_and_frames(tmp_path):
    path, data = _canonical(tmp_path)
    with h5py.File(path, "a") as f:
        f["data"][1, 2, 3, 5, 0] = np.nan
    src = open_source(path)
    src.read(1, 0, 5)  # frames before the NaN are fine
    with pytest.raises(NonFiniteDataError) as info:
        src.read(1, 3, 7)
    message = str(info.value)
    assert str(path) in message and "'data'" in message and "sample 1" in message and "[5]" in message
    ds = WindowDataset(path, t_in=2, t_out=1)
    with pytest.raises(NonFiniteDataError):
        for i in range(len(ds)):
            ds[i]


def test_nan_windows_skipped_with_counted_warning(tmp_path):
    path, data = _canonical(tmp_path, n=3, t=8)
    with h5py.File(path, "a") as f:
        f["data"][1, 0, 0, 5, 1] = np.inf
    with pytest.warns(RuntimeWarning, match=r"skipped 3 of 18 windows"):
        ds = WindowDataset(path, t_in=2, t_out=1, nan_policy="skip")
    # windows of 3 frames starting at 3, 4, 5 touch frame 5 of sample 1
    assert ds.skipped_windows == 3 and len(ds) == 15
    positions = {ds.window_position(i) for i in range(len(ds))}
    assert not positions & {(1, 3), (1, 4), (1, 5)} and (1, 2) in positions
    for i in range(len(ds)):
        assert torch.isfinite(ds[i]["x"]).all()


def test_writer_refuses_nan_and_leaves_nothing(tmp_path):
    out = tmp_path / "x.h5"
    with pytest.raises(DataFormatError, match=r"refusing to write NaN/Inf values \(trajectories \[1\]\)"):
        with CanonicalWriter(out, 2, (3, 3), 2, ["u"]) as w:
            block = np.zeros((2, 3, 3, 2, 1), np.float32)
            block[1, 0, 0, 0, 0] = np.nan
            w.append(block)
    assert os.listdir(tmp_path) == []


def test_writer_incomplete_leaves_nothing(tmp_path):
    out = tmp_path / "x.h5"
    with pytest.raises(DataFormatError, match="only 1 of 2"):
        with CanonicalWriter(out, 2, (3, 3), 2, ["u"]) as w:
            w.append(np.zeros((1, 3, 3, 2, 1)))
    assert os.listdir(tmp_path) == []


class _FailingNS(NavierStokes2D):
    """Fails on the second batch, as a solver blowing up mid-run would."""

    def solve(self, w0):
        self.calls = getattr(self, "calls", 0) + 1
        out = super().solve(w0)
        if self.calls == 2:
            out[0, 0, 0, 0, 0] = float("nan")
        return out


def test_failing_generator_writes_nothing_and_keeps_old_file(tmp_path):
    out = tmp_path / "ns.h5"
    out.write_bytes(b"previous contents")
    gen = _FailingNS(res=8, steps=1, record_dt=0.1)
    with pytest.raises(GeneratorError, match=r"trajectories \[2\]"):
        generate_to_file(gen, out, n=4, batch_size=2, progress=False)
    assert out.read_bytes() == b"previous contents"
    assert sorted(os.listdir(tmp_path)) == ["ns.h5"]


def test_interrupted_generator_writes_nothing(tmp_path, monkeypatch):
    out = tmp_path / "ns.h5"

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    import opzoo.data.generators.base as base

    calls = {"n": 0}
    real = base.generate_batch

    def second_batch_interrupts(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            interrupt()
        return real(*args, **kwargs)

    monkeypatch.setattr(base, "generate_batch", second_batch_interrupts)
    with pytest.raises(KeyboardInterrupt):
        generate("ns", out, n=4, batch_size=2, progress=False, res=8, steps=1, record_dt=0.1)
    assert os.listdir(tmp_path) == []


def test_no_overwrite_without_permission(tmp_path):
    out = tmp_path / "ns.h5"
    out.write_bytes(b"keep")
    with pytest.raises(FileExistsError, match="exists"):
        generate("ns", out, n=1, progress=False, overwrite=False, res=8, steps=1, record_dt=0.1)
    assert out.read_bytes() == b"keep"


def test_the_well_field_with_wrong_shape(tmp_path):
    from tests.data.foreign_layouts import write_the_well

    rho = np.zeros((2, 4, 6, 5))
    path = tmp_path / "well.hdf5"
    write_the_well(path, {"density": rho}, {"velocity": np.zeros((2, 4, 6, 5, 2))}, {}, np.arange(4.0))
    with h5py.File(path, "a") as f:
        del f["t1_fields/velocity"]
        f["t1_fields/velocity"] = np.zeros((2, 4, 5, 6, 2), np.float32)  # x and y swapped
    with pytest.raises(DataFormatError) as info:
        open_source(path)
    message = str(info.value)
    assert "'t1_fields/velocity' has shape [2, 4, 5, 6, 2]" in message and "[N, T, X, Y, D] = [2, 4, 6, 5, 2]" in message

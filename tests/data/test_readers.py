"""Readers: each foreign layout, written with the original key names and axis orders, reads back
the trajectories it was built from; detection; errors for files in no layout; lazy reads."""

import h5py
import numpy as np
import pytest

from opzoo.data import UnknownLayoutError, detect_layout, open_source, write_canonical
from tests.data.foreign_layouts import write_fno_mat, write_pdebench_cfd, write_pdebench_groups, write_the_well

N, X, Y, T = 3, 6, 5, 7  # X != Y so that a swapped axis cannot pass


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_canonical_round_trip(tmp_path, rng):
    data = rng.standard_normal((N, X, Y, T, 2)).astype(np.float32)
    write_canonical(tmp_path / "c.h5", data, ["u", "v"], pde="test", params={"nu": 0.1}, dt=0.5,
                    times=0.5 * np.arange(T), coords={"x": np.arange(X), "y": np.arange(Y)})
    src = open_source(tmp_path / "c.h5")
    assert src.info.layout == "canonical" and src.shape == (N, X, Y, T, 2)
    assert src.fields == ["u", "v"] and src.info.dt == 0.5 and src.info.params == {"nu": 0.1}
    assert src.info.pde == "test" and np.array_equal(src.info.coords["y"], np.arange(Y))
    for i in range(N):
        np.testing.assert_array_equal(src.read(i), data[i])
    np.testing.assert_array_equal(src.read(1, 2, 5), data[1, :, :, 2:5])


def test_dpot_processed_file_without_attributes(tmp_path, rng):
    data = rng.standard_normal((N, X, Y, T, 4)).astype(np.float32)
    with h5py.File(tmp_path / "dpot.hdf5", "w") as f:
        f["data"] = data
    src = open_source(tmp_path / "dpot.hdf5")
    assert src.fields == ["c0", "c1", "c2", "c3"] and src.info.dt is None
    np.testing.assert_array_equal(src.read(2, 3, 7), data[2, :, :, 3:7])


def test_pdebench_cfd(tmp_path, rng):
    data = rng.standard_normal((N, X, Y, T, 4)).astype(np.float32)
    write_pdebench_cfd(tmp_path / "2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_periodic_128_Train.hdf5", data, dt=0.05)
    path = tmp_path / "2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_periodic_128_Train.hdf5"
    assert detect_layout(path) == "pdebench-cfd"
    src = open_source(path)
    assert src.fields == ["density", "pressure", "Vx", "Vy"] and src.shape == (N, X, Y, T, 4)
    assert src.info.dt == pytest.approx(0.05)
    for i in range(N):
        np.testing.assert_array_equal(src.read(i), data[i])
    np.testing.assert_array_equal(src.read(1, 4, 6), data[1, :, :, 4:6])


def test_pdebench_groups(tmp_path, rng):
    data = rng.standard_normal((N, X, Y, T, 2)).astype(np.float32)
    path = tmp_path / "2D_diff-react_NA_NA.h5"
    write_pdebench_groups(path, data, dt=0.05)
    assert detect_layout(path) == "pdebench-groups"
    src = open_source(path)
    assert src.shape == (N, X, Y, T, 2) and src.info.dt == pytest.approx(0.05)
    for i in range(N):
        np.testing.assert_array_equal(src.read(i), data[i])
    np.testing.assert_array_equal(src.read(2, 1, 3), data[2, :, :, 1:3])


def test_pdebench_groups_sorts_samples_numerically(tmp_path, rng):
    data = rng.standard_normal((12, 4, 4, 3, 1)).astype(np.float32)
    path = tmp_path / "swe.h5"
    with h5py.File(path, "w") as f:  # created out of order
        for i in reversed(range(12)):
            f[f"{i:04d}/data"] = np.transpose(data[i], (2, 0, 1, 3))
            f[f"{i:04d}/grid/t"] = np.arange(3.0)
    src = open_source(path)
    np.testing.assert_array_equal(src.read(10), data[10])


def test_fno_matlab_v73(tmp_path, rng):
    u = rng.standard_normal((N, X, Y, T, 1)).astype(np.float32)  # MATLAB u(N, X, Y, T)
    a = rng.standard_normal((N, X, Y)).astype(np.float32)
    times = np.arange(1, T + 1, dtype=np.float64)
    path = tmp_path / "ns_V1e-3_N5000_T50.mat"
    write_fno_mat(path, u, a, times)
    with h5py.File(path, "r") as f:  # the on-disk order really is reversed
        assert f["u"].shape == (T, Y, X, N) and f["a"].shape == (Y, X, N)
    assert detect_layout(path) == "fno-mat"
    src = open_source(path)
    assert src.shape == (N, X, Y, T, 1) and src.info.dt == pytest.approx(1.0)
    for i in range(N):
        np.testing.assert_array_equal(src.read(i), u[i])
    with_a = open_source(path, prepend_initial=True)
    assert with_a.n_steps == T + 1 and with_a.info.times[0] == 0.0
    np.testing.assert_array_equal(with_a.read(1, 0, 3)[..., 0, 0], a[1])
    np.testing.assert_array_equal(with_a.read(1, 0, 3)[..., 1:, :], u[1, :, :, :2])


def test_the_well(tmp_path, rng):
    density = rng.standard_normal((N, T, X, Y))
    pressure = rng.standard_normal((N, T, X, Y))
    velocity = rng.standard_normal((N, T, X, Y, 2))
    stress = rng.standard_normal((N, T, X, Y, 2, 2))
    mask = rng.standard_normal((N, X, Y))  # sample- but not time-varying
    times = 0.1 * np.arange(T)
    path = tmp_path / "shear_flow_Reynolds_1e2.hdf5"
    write_the_well(path, {"density": density, "pressure": pressure}, {"velocity": velocity},
                   {"stress": stress}, times, static={"obstacle": mask})
    assert detect_layout(path) == "the-well"
    src = open_source(path)
    assert src.fields == ["density", "pressure", "obstacle", "velocity_x", "velocity_y",
                          "stress_xx", "stress_xy", "stress_yx", "stress_yy"]
    assert src.shape == (N, X, Y, T, 9) and src.info.dt == pytest.approx(0.1)
    assert src.info.pde == "test_dataset" and src.info.params == {"Reynolds": 100.0}
    expected = np.stack(
        [density, pressure, np.broadcast_to(mask[:, None], (N, T, X, Y)), velocity[..., 0], velocity[..., 1],
         stress[..., 0, 0], stress[..., 0, 1], stress[..., 1, 0], stress[..., 1, 1]], axis=-1
    )  # [N, T, X, Y, C]
    expected = np.moveaxis(expected, 1, -2).astype(np.float32)  # [N, X, Y, T, C]
    for i in range(N):
        np.testing.assert_array_equal(src.read(i), expected[i])
    np.testing.assert_array_equal(src.read(0, 2, 4), expected[0, :, :, 2:4])


def test_unknown_layout_names_what_was_found_and_expected(tmp_path):
    path = tmp_path / "mystery.h5"
    with h5py.File(path, "w") as f:
        f["frames"] = np.zeros((2, 3, 4), np.float32)
        f.attrs["author"] = "me"
    with pytest.raises(UnknownLayoutError) as info:
        open_source(path)
    message = str(info.value)
    assert str(path) in message and "'frames' dataset [2, 3, 4]" in message and "author" in message
    for layout, needs in [("canonical", "'data'"), ("pdebench-cfd", "'density'"), ("pdebench-groups", "'0000'"),
                          ("fno-mat", "'u'"), ("the-well", "t0_fields")]:
        assert layout in message and needs in message


def test_read_is_lazy(tmp_path, rng, monkeypatch):
    """A window read asks h5py for that hyperslab only, never the whole dataset."""
    data = rng.standard_normal((4, X, Y, 20, 2)).astype(np.float32)
    write_canonical(tmp_path / "c.h5", data, ["u", "v"])
    src = open_source(tmp_path / "c.h5")
    selections = []
    original = h5py.Dataset.__getitem__

    def recording(self, key, *args, **kwargs):
        out = original(self, key, *args, **kwargs)
        if self.name == "/data":
            selections.append(out.size)
        return out

    monkeypatch.setattr(h5py.Dataset, "__getitem__", recording)
    window = src.read(3, 5, 16)
    np.testing.assert_array_equal(window, data[3, :, :, 5:16])
    assert selections == [X * Y * 11 * 2]


def test_source_survives_fork_style_reopen(tmp_path, rng):
    data = rng.standard_normal((2, 4, 4, 3, 1)).astype(np.float32)
    write_canonical(tmp_path / "c.h5", data, ["u"])
    src = open_source(tmp_path / "c.h5")
    state = src.__getstate__()
    assert state["_file"] is None  # handles are never carried into worker processes
    src._pid = -1  # pretend we are in a forked worker: the file is re-opened
    np.testing.assert_array_equal(src.read(1), data[1])


def test_convert_foreign_layout_to_canonical(tmp_path, rng):
    from opzoo.data import convert_to_canonical

    data = rng.standard_normal((N, X, Y, T, 4)).astype(np.float32)
    write_pdebench_cfd(tmp_path / "cfd.hdf5", data, dt=0.05)
    convert_to_canonical(tmp_path / "cfd.hdf5", tmp_path / "cfd_canonical.h5", progress=False)
    out = open_source(tmp_path / "cfd_canonical.h5")
    assert out.info.layout == "canonical" and out.fields == ["density", "pressure", "Vx", "Vy"]
    assert out.info.dt == pytest.approx(0.05) and out.info.attrs["source_layout"] == "pdebench-cfd"
    for i in range(N):
        np.testing.assert_array_equal(out.read(i), data[i])


def test_select_channels_by_name_fills_a_missing_field_only_when_asked(tmp_path, rng):
    """A model trained with missing fields filled (GPhyT: zero) reads a file lacking one as that value; without
    ``fill`` the name is refused, and a file with none of the names is refused either way. A trajectory's content
    hash is the file's own channels, whatever the selection."""
    from opzoo.data.errors import DataFormatError

    data = rng.standard_normal((2, 8, 8, 3, 2)).astype(np.float32)
    path = tmp_path / "f.h5"
    write_canonical(path, data, ["pressure", "velocity_x"])
    src = open_source(path)
    before = src.trajectory_hash(0)
    with pytest.raises(DataFormatError, match="needs field\\(s\\) density"):
        src.select_channels(["velocity_x", "density", "pressure"])
    with pytest.raises(DataFormatError, match="needs field\\(s\\) density, temperature"):
        src.select_channels(["density", "temperature"], fill=0.0)
    assert src.select_channels(["velocity_x", "density", "pressure"], fill=0.0) == ["density"]
    window = src.read(1, 0, 2)
    assert window.shape == (8, 8, 2, 3) and src.fields == ["velocity_x", "density", "pressure"]
    np.testing.assert_array_equal(window[..., 0], data[1, ..., :2, 1])
    np.testing.assert_array_equal(window[..., 2], data[1, ..., :2, 0])
    assert not window[..., 1].any()
    src._hashes = {}  # recomputed under the selection: the same file content, the same hash
    assert src.trajectory_hash(0) == before

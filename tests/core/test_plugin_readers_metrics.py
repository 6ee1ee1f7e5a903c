"""Issue 57: a plugin adds a data reader (registry.register_reader) or a metric (registry.register_metric, opzoo.Metric),
and every command uses them beside the core's. The installed example plugin's .labtraj reader and MAE metric are
exercised end to end in test_third_party_plugin.py; here, the registry's rules and the metric arithmetic."""

import math

import pytest
import torch

import opzoo
from opzoo.data import TrajectorySource
from opzoo.data.readers import LAYOUTS, ArraySource
from opzoo.errors import RegistryConflictError
from opzoo.evaluation.pdebench_metrics import NAMES, PDEBENCH_METRICS, TrajectoryMetrics, bootstrap


def _registry_with_the_core():
    registry = opzoo.Registry()
    with registry.owned_by("opzoo"):
        for reader in LAYOUTS.values():
            registry.register_reader(reader)
        for metric in PDEBENCH_METRICS:
            registry.register_metric(metric)
    return registry


class LabReader(TrajectorySource):
    layout = "lab"
    suffixes = (".lab",)
    expects = "a .lab file"


def test_the_live_registry_holds_the_core_readers_and_metrics_first():
    registry = opzoo.get_registry()
    assert list(registry.readers())[:len(LAYOUTS)] == list(LAYOUTS)
    assert [m.name for m in registry.metrics()][:len(NAMES)] == list(NAMES)
    assert registry.owner("metric", "nRMSE") == "opzoo" and registry.owner("reader", "array") == "opzoo"


def test_a_reader_is_a_trajectory_source_with_a_layout_name():
    registry = _registry_with_the_core()
    for bad, words in [(object, "layout name"), (type("NoLayout", (TrajectorySource,), {"layout": ""}), "layout name"),
                       (type("Colon", (TrajectorySource,), {"layout": "a:b"}), "no ':'"),
                       (type("Lone", (), {"layout": "lone"}), "no detect()"),
                       (type("Suffix", (TrajectorySource,), {"layout": "s", "suffixes": ["lab"]}), "'.ext'")]:
        with pytest.raises(TypeError, match=words):
            registry.register_reader(bad)
    assert "lab" not in registry.readers()  # nothing half-registered
    with registry.owned_by("lab-plugin"):
        registry.register_reader(LabReader)
    assert list(registry.readers())[-1] == "lab" and registry.owner("reader", "lab") == "lab-plugin"


def test_a_reader_cannot_take_a_layout_a_suffix_or_hdf5_files_from_another():
    registry = _registry_with_the_core()
    with registry.owned_by("lab-plugin"):
        with pytest.raises(RegistryConflictError, match="'opzoo' and 'lab-plugin'"):
            registry.register_reader(type("Array2", (TrajectorySource,), {"layout": "array"}))
        with pytest.raises(RegistryConflictError, match=r"(?i)suffix \.npy \(reader 'array'\)"):
            registry.register_reader(type("Npy", (TrajectorySource,), {"layout": "npy2", "suffixes": (".NPY",)}))
        with pytest.raises(RegistryConflictError, match="HDF5 and told apart by their content"):
            registry.register_reader(type("H5", (TrajectorySource,), {"layout": "h5x", "suffixes": (".h5",)}))
    assert set(registry.readers()) == set(LAYOUTS)
    assert ArraySource.suffixes and all(not cls.suffixes for n, cls in LAYOUTS.items() if n != "array")


def test_a_metric_names_a_column_and_pools_by_mean_or_max():
    with pytest.raises(ValueError, match="names a CSV column"):
        opzoo.Metric("mean abs", lambda p, u, lengths: p)
    with pytest.raises(ValueError, match="pool must be one of mean, max"):
        opzoo.Metric("MAE", lambda p, u, lengths: p, pool="median")
    with pytest.raises(TypeError, match="callables"):
        opzoo.Metric("MAE", "abs")
    registry = _registry_with_the_core()
    with pytest.raises(TypeError, match="expected opzoo.Metric"):
        registry.register_metric(lambda p, u, lengths: p)
    with registry.owned_by("lab-plugin"), pytest.raises(RegistryConflictError, match="metric 'nRMSE'"):
        registry.register_metric(opzoo.Metric("nRMSE", lambda p, u, lengths: p))


def _pair(seed=0, b=5):
    g = torch.Generator().manual_seed(seed)
    truth = torch.randn(b, 16, 8, 3, 2, generator=g, dtype=torch.float64)
    return truth + 0.1 * torch.randn(truth.shape, generator=g, dtype=torch.float64), truth


MAE = opzoo.Metric("MAE", lambda p, u, lengths: (p - u).abs().flatten(1).mean(1))
WORST = opzoo.Metric("worst", lambda p, u, lengths: (p - u).abs().flatten(1).amax(1), pool="max")


def test_a_plugin_metric_is_scored_per_trajectory_with_its_interval_and_paired_difference():
    pred, truth = _pair()
    m = TrajectoryMetrics(metrics=(*PDEBENCH_METRICS, MAE, WORST))
    m.add(pred[:2], truth[:2])
    m.add(pred[2:], truth[2:])
    per = [float((pred[b] - truth[b]).abs().mean()) for b in range(5)]
    worst = [float((pred[b] - truth[b]).abs().max()) for b in range(5)]
    values = m.values()
    assert list(values) == [*NAMES, "MAE", "worst"]
    assert values["MAE"] == pytest.approx(sum(per) / 5, rel=1e-12)
    assert values["worst"] == pytest.approx(max(worst), rel=1e-12)
    drawn = [0, 0, 3]  # a bootstrap draws with repeats
    assert m.values(drawn)["MAE"] == pytest.approx((2 * per[0] + per[3]) / 3, rel=1e-12)
    assert m.values(drawn)["worst"] == pytest.approx(max(worst[0], worst[3]), rel=1e-12)
    lo, hi = bootstrap(m)["MAE"]
    assert min(per) <= lo <= values["MAE"] <= hi <= max(per)
    base = TrajectoryMetrics(metrics=(MAE,))
    base.add(truth + 0.2, truth)
    paired = bootstrap(m, base)
    assert list(paired) == ["MAE"]  # the metrics both scored
    d_lo, d_hi = paired["MAE"]
    assert d_lo <= values["MAE"] - 0.2 <= d_hi < 0  # paired: the same trajectories drawn for both
    assert math.isnan(TrajectoryMetrics(metrics=(MAE,)).values()["MAE"])


def test_the_pdebench_set_is_the_same_numbers_through_the_metric_objects():
    """The set, now nine Metric objects, still computes PDEBench's metric_func (hand-checked on a constant error)."""
    truth = torch.ones(2, 16, 16, 4, 1, dtype=torch.float64)
    m = TrajectoryMetrics(metrics=PDEBENCH_METRICS)
    m.add(truth + 0.5, truth)
    v = m.values()
    assert v["RMSE"] == pytest.approx(0.5) and v["nRMSE"] == pytest.approx(0.5) and v["bRMSE"] == pytest.approx(0.5)
    assert v["max_error"] == pytest.approx(0.5) and v["cRMSE"] == pytest.approx(0.5)  # |sum p - sum u| / N


def test_a_metric_returning_the_wrong_shape_is_refused_by_name():
    pred, truth = _pair()
    m = TrajectoryMetrics(metrics=(opzoo.Metric("bad", lambda p, u, lengths: (p - u).abs().mean()),))
    with pytest.raises(ValueError, match=r"metric 'bad': parts\(\) must return a tensor \[B, \.\.\.\]"):
        m.add(pred, truth)


def test_the_old_per_metric_fields_still_read_behind_a_warning():
    pred, truth = _pair()
    m = TrajectoryMetrics(metrics=PDEBENCH_METRICS)
    m.add(pred, truth)
    with pytest.warns(DeprecationWarning, match=r"parts\['nRMSE'\]"):
        assert m.nrmse is m.parts["nRMSE"]
    with pytest.raises(AttributeError, match="scaled by the grid"):
        m.conserved


@pytest.fixture
def broken_metrics(monkeypatch):
    """Plugins' metrics that fail each its own way, registered in the live registry (removed after)."""
    import time

    import opzoo.data.readers as readers
    import opzoo.evaluation.pdebench_metrics as pdebench_metrics

    registry = opzoo.get_registry()
    monkeypatch.setenv("OPZOO_PLUGIN_DEADLINE", "0.5")
    monkeypatch.setattr(pdebench_metrics, "_SAID", set())  # each test hears what is left out (said once a process)
    monkeypatch.setattr(readers, "_SAID", set())

    def hang(p, u, lengths):
        time.sleep(30)

    broken = {"raises": lambda p, u, lengths: 1 / 0, "a_string": lambda p, u, lengths: "x",
              "wrong_shape": lambda p, u, lengths: torch.zeros(p.shape[0] + 1),
              "huge": lambda p, u, lengths: torch.zeros(p.shape[0], 10**6, dtype=torch.float32), "hangs": hang}
    with registry.owned_by("broken-plugin"):
        for name, parts in broken.items():
            registry.register_metric(opzoo.Metric(name, parts))
        registry.register_metric(opzoo.Metric("bad_reduce", lambda p, u, lengths: (p - u).abs().flatten(1),
                                              reduce=lambda pooled: "x"))
        registry.register_metric(opzoo.Metric("fine", lambda p, u, lengths: (p - u).abs().flatten(1).mean(1)))
    yield list(broken) + ["bad_reduce"]
    registry.forget("broken-plugin")


def test_a_plugins_metric_that_fails_is_left_out_and_the_others_go_on(broken_metrics, caplog):
    import logging

    p, u = torch.rand(3, 8, 8, 2, 1), torch.rand(3, 8, 8, 2, 1)
    metrics = TrajectoryMetrics()
    with caplog.at_level(logging.WARNING, logger="opzoo"):
        metrics.add(p, u)
        values = metrics.values()
        intervals = bootstrap(metrics, n=20)
    assert set(NAMES) | {"fine"} == set(values) == set(intervals)
    assert set(metrics.left_out) == set(broken_metrics)
    assert "raised ZeroDivisionError" in metrics.left_out["raises"]
    assert "no answer within 0.5 s (OPZOO_PLUGIN_DEADLINE" in metrics.left_out["hangs"]
    assert "1,000,000 values per trajectory" in metrics.left_out["huge"]
    assert all("of broken-plugin" in why for why in metrics.left_out.values())
    said = [r.getMessage() for r in caplog.records if "left out of the scores" in r.getMessage()]
    assert len(said) == len(broken_metrics)
    assert values["fine"] == pytest.approx(float((p - u).abs().mean()), rel=1e-6)


def _lab_reader(name: str, **overrides):
    """An HDF5 reader of files holding a 'lab' dataset [N, X, T, C], with one of its hooks broken by ``overrides``."""
    import numpy as np

    from opzoo.data import SourceInfo

    def detect(cls, f):
        return "lab" in f

    def validate(self, f):
        n, x, t, c = f["lab"].shape
        return SourceInfo(self.layout, n, (x,), t, [f"c{i}" for i in range(c)])

    def read(self, f, sample, t0, t1):
        return np.asarray(f["lab"][sample, :, t0:t1, :])

    body = {"layout": name, "expects": "'lab' [N, X, T, C]", "detect": classmethod(detect), "_validate": validate,
            "_read": read}
    body.update(overrides)
    return type(f"Lab_{name}", (TrajectorySource,), body)


def test_a_plugins_reader_that_fails_is_refused_by_name_and_the_others_still_read(tmp_path, monkeypatch, caplog):
    import logging
    import time

    import h5py
    import numpy as np

    import opzoo.data.readers as readers
    from opzoo.data import SourceInfo
    from opzoo.data.errors import DataFormatError
    from opzoo.data.readers import open_source

    monkeypatch.setenv("OPZOO_PLUGIN_DEADLINE", "0.5")
    monkeypatch.setattr(readers, "_SAID", set())
    canonical = tmp_path / "canonical.h5"
    with h5py.File(canonical, "w") as f:
        f["data"] = np.ones((2, 4, 3, 1), dtype=np.float32)
    lab = tmp_path / "x.h5"
    with h5py.File(lab, "w") as f:
        f["lab"] = np.ones((2, 4, 3, 1), dtype=np.float32)

    def hang(cls, f):
        time.sleep(30)

    registry = opzoo.get_registry()
    with registry.owned_by("broken-readers"):
        registry.register_reader(_lab_reader("raises_detect", detect=classmethod(lambda cls, f: 1 / 0)))
        registry.register_reader(_lab_reader("hangs_detect", detect=classmethod(hang)))
        registry.register_reader(_lab_reader("string_read", _read=lambda self, f, i, a, b: "frames"))
        registry.register_reader(_lab_reader("raising_read", _read=lambda self, f, i, a, b: [][1]))
        registry.register_reader(_lab_reader("huge", _validate=lambda self, f: SourceInfo(self.layout, 10**12, (4,),
                                                                                          3, ["u"])))
    try:
        assert open_source(canonical).read(0).shape == (4, 3, 1)  # the core's reader
        with caplog.at_level(logging.WARNING, logger="opzoo"):
            assert open_source(lab).layout == "string_read"  # detection goes past the two broken detects
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "reader 'raises_detect' of broken-readers: raised ZeroDivisionError" in said
        assert "reader 'hangs_detect' of broken-readers: no answer within 0.5 s" in said
        for layout, words in (("string_read", "returned str, not an array of numbers"),
                              ("raising_read", "reader 'raising_read' of broken-readers: raised IndexError"),
                              ("huge", "declares 1000000000000 trajectories; a file holds 1 to 100,000,000")):
            with pytest.raises(DataFormatError, match=words) as e:
                open_source(lab, layout=layout).read(0)
            assert "\n" not in str(e.value)
    finally:
        registry.forget("broken-readers")


def test_eval_serves_the_built_in_metrics_and_readers_beside_a_broken_plugin(tmp_path, broken_metrics, monkeypatch,
                                                                            capsys):
    """The conformance of the host: a plugin's metric that fails, and a plugin's reader whose detect fails, are left
    out of `opzoo eval` with a line naming their package; the command serves the core's readers and metrics."""
    import json

    import h5py
    import numpy as np

    from opzoo.cli import main

    registry = opzoo.get_registry()
    with registry.owned_by("broken-readers"):
        registry.register_reader(_lab_reader("raises_detect2", detect=classmethod(lambda cls, f: 1 / 0)))
    try:
        rng = np.random.default_rng(0)
        with h5py.File(tmp_path / "data.h5", "w") as f:
            f["data"] = rng.normal(size=(3, 8, 8, 4, 1)).astype(np.float32)
            f.attrs["fields"] = ["u"]
        lab = tmp_path / "lab.h5"
        with h5py.File(lab, "w") as f:
            f["lab"] = np.ones((2, 4, 3, 1), dtype=np.float32)
        opzoo.create_model("simple", in_channels=1, out_channels=1, in_timesteps=2, width=8).save_pretrained(
            tmp_path / "model")
        code = main(["eval", str(tmp_path / "model"), "--data", str(tmp_path / "data.h5"), "--split", "all",
                     "--out", str(tmp_path / "eval")])
        out = capsys.readouterr()
        assert code == 0, out.err
        scored = json.loads((tmp_path / "eval" / "eval.json").read_text())["datasets"]["data"]["pdebench_metrics"]
        assert set(NAMES) | {"fine"} == set(scored)
        assert "left out of the scores: metric 'raises' of broken-plugin: raised ZeroDivisionError" in out.out
        assert main(["data", "inspect", str(lab)]) == 2  # no reader left claims it: said, naming the package
        said = capsys.readouterr()
        assert "reader 'raises_detect2' of broken-readers: raised ZeroDivisionError" in said.out + said.err
    finally:
        registry.forget("broken-readers")

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

"""PDEBench's metric set in opzoo (opzoo.evaluation.pdebench_metrics) against PDEBench's own ``metric_func`` on shared
inputs (recorded by tests/training/pdebench_metrics_reference.py from a checkout at 9754b4c; the slow test reruns it
when OPZOO_PDEBENCH_REPO names one), by hand on a small case, and its spread: bootstrap intervals and the paired
comparison with persistence that `opzoo eval` prints."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from opzoo.evaluation.pdebench_metrics import NAMES, TrajectoryMetrics, bootstrap

from .pdebench_metrics_reference import DEFAULT_OUT, SHAPES, record


def ours(pred, target) -> dict[str, float]:
    m = TrajectoryMetrics()
    m.add(pred[:1], target[:1])  # in two batches: the parts are per trajectory
    m.add(pred[1:], target[1:])
    return m.values()


def check_against(reference: dict[str, torch.Tensor]) -> None:
    for name in SHAPES:
        mine = ours(reference[f"{name}_pred"], reference[f"{name}_target"])
        theirs = {k: reference[f"{name}_{k}"] for k in ("RMSE", "nRMSE", "cRMSE", "max_error", "bRMSE")}
        for k, v in theirs.items():
            assert mine[k] == pytest.approx(float(v[0]), rel=1e-12), (name, k)
        # metric_func sums the spectrum's bins and bands into float32 tensors (torch.zeros' default dtype): float32
        # rounding of float64 values, 6e-8 relative at most
        low, mid, high = reference[f"{name}_fRMSE"].tolist()
        for k, v in (("fRMSE_low", low), ("fRMSE_mid", mid), ("fRMSE_high", high)):
            assert (math.isnan(mine[k]) and math.isnan(v)) or mine[k] == pytest.approx(v, rel=1e-6), (name, k)


def test_the_metrics_are_pdebench_metric_funcs_on_shared_inputs():
    check_against(load_file(str(DEFAULT_OUT)))


@pytest.mark.slow
def test_the_recording_is_what_pdebench_computes_now(tmp_path):
    repo = os.environ.get("OPZOO_PDEBENCH_REPO")
    if not repo or not (Path(repo) / "pdebench" / "models" / "metrics.py").is_file():
        pytest.skip("OPZOO_PDEBENCH_REPO does not name a checkout of github.com/pdebench/PDEBench")
    check_against(load_file(str(record(repo, tmp_path / "live.safetensors"))))


def test_by_hand_on_a_small_1d_case():
    """One trajectory, one channel, one step, x in 4 points: p - u = [1, 0, 0, -1], u = [1, 1, 1, 1]."""
    u = torch.ones(1, 4, 1, 1, dtype=torch.float64)
    p = u + torch.tensor([1.0, 0, 0, -1.0], dtype=torch.float64).reshape(1, 4, 1, 1)
    m = ours(torch.cat([p, p]), torch.cat([u, u]))  # the same trajectory twice: means are its values
    assert m["RMSE"] == pytest.approx(math.sqrt(2 / 4))
    assert m["nRMSE"] == pytest.approx(math.sqrt(2 / 4) / 1.0)
    assert m["cRMSE"] == pytest.approx(0.0)  # the sums agree
    assert m["max_error"] == pytest.approx(1.0)
    assert m["bRMSE"] == pytest.approx(math.sqrt((1 + 1) / 2))
    spectrum = torch.fft.rfft(torch.tensor([1.0, 0, 0, -1.0], dtype=torch.float64)).abs()  # |F| per frequency
    assert m["fRMSE_low"] == pytest.approx(float(spectrum.mean()) / 4)  # sqrt(mean_B |F|^2) / nx, mean over bins


def test_intervals_and_the_paired_comparison():
    g = torch.Generator().manual_seed(1)
    u = torch.randn(12, 16, 16, 3, 1, generator=g, dtype=torch.float64)
    good, bad = TrajectoryMetrics(), TrajectoryMetrics()
    good.add(u + 0.1 * torch.randn(u.shape, generator=g, dtype=torch.float64), u)
    bad.add(u + 0.5 * torch.randn(u.shape, generator=g, dtype=torch.float64), u)
    spread = bootstrap(good, n=300)
    value = good.values()
    for k in NAMES:
        lo, hi = spread[k]
        assert math.isnan(value[k]) or lo <= value[k] <= hi, k
    diff = bootstrap(good, bad, n=300)
    assert diff["nRMSE"][1] < 0  # clearly better: the whole interval below 0
    with pytest.raises(ValueError, match="same trajectories"):
        bootstrap(good, TrajectoryMetrics())


def test_a_band_beyond_the_grid_is_n_a_with_its_reason_not_nan():
    """On a 16x16 grid the radial bins stop below 8: fRMSE_high (12+) has nothing to score. PDEBench's metric_func
    gives NaN there too (the recording above); `opzoo eval`'s table says n/a and why, never a bare nan."""
    from opzoo.evaluation.pdebench_metrics import why_undefined
    from opzoo.evaluation.rollouts import DatasetResult, metric_table

    g = torch.Generator().manual_seed(2)
    u = torch.randn(6, 16, 16, 3, 1, generator=g, dtype=torch.float64)
    model, base = TrajectoryMetrics(), TrajectoryMetrics()
    model.add(u + 0.1 * torch.randn(u.shape, generator=g, dtype=torch.float64), u)
    base.add(u + 0.3 * torch.randn(u.shape, generator=g, dtype=torch.float64), u)
    values = model.values()
    assert math.isnan(values["fRMSE_high"]) and not math.isnan(values["fRMSE_mid"])

    def result(m: TrajectoryMetrics, persistence=None) -> DatasetResult:
        return DatasetResult("heat", 0.1, [0.1], 6, 3, grid=[16, 16], metrics=m.values(),
                             intervals={k: list(v) for k, v in bootstrap(m, n=50).items()}, persistence=persistence)

    r = result(model, result(base))
    r.paired = {k: [r.metrics[k] - r.persistence.metrics[k], *v] for k, v in bootstrap(model, base, n=50).items()}
    text = "\n".join(metric_table(r))
    assert "nan" not in text.lower()
    row = next(line for line in text.splitlines() if line.strip().startswith("fRMSE_high"))
    assert row.split()[1:] == ["n/a", "n/a", "n/a"]
    assert text.splitlines()[-1] == ("  (n/a: fRMSE_high: the grid 16x16 has no wavenumber of 12 or more (its radial "
                                     "bins stop below 8))")
    # 1-D: the rfft's nx // 2 + 1 frequencies; a metric NaN for another reason is not blamed on the grid
    assert why_undefined("fRMSE_high", [20]).endswith("(its radial bins stop below 11)")
    assert why_undefined("fRMSE_high", [24]) == "fRMSE_high: not defined on these data"  # 13 bins: 12 is one
    assert why_undefined("nRMSE", [16, 16]) == "nRMSE: not defined on these data"

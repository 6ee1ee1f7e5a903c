"""Poseidon's efficiency and accuracy gains (opzoo.evaluation.gains), checked against values computed by hand."""

from __future__ import annotations

import math

import pytest

from opzoo.evaluation.gains import accuracy_gain, crossing, efficiency_gain

NS = [2, 8, 32]
BASELINE = [2.0, 0.5, 0.125]  # E = 4 / N: the target is its error at N = 32, 0.125


def test_accuracy_gain_is_the_baselines_error_over_the_models():
    assert accuracy_gain(0.5, 0.25) == 2.0
    assert accuracy_gain(0.1, 0.4) == 0.25
    assert all(math.isnan(accuracy_gain(a, b)) for a, b in ((0.0, 1.0), (1.0, 0.0), (math.nan, 1.0), (math.inf, 1.0)))


def test_efficiency_gain_read_off_between_measured_points():
    # E = 1 / N reaches 0.125 at N* = 8 exactly: EG = 32 / 8
    g = efficiency_gain(NS, [0.5, 0.125, 1 / 32], BASELINE)
    assert g.value == pytest.approx(4.0) and not g.extrapolated
    # between N = 2 (0.25) and N = 8 (0.0625): log-linear, E = 0.5 / N, reaches 0.125 at N* = 4: EG = 8
    g = efficiency_gain(NS, [0.25, 0.0625, 0.02], BASELINE)
    assert g.value == pytest.approx(8.0) and not g.extrapolated
    # a curve that is not a power law: the segment 8 -> 32 from 0.2 to 0.1 crosses 0.125 where
    # log N* = log 8 + (log 0.125 - log 0.2) / ((log 0.1 - log 0.2) / log 4)
    n_star = math.exp(math.log(8) + (math.log(0.125) - math.log(0.2)) / ((math.log(0.1) - math.log(0.2)) / math.log(4)))
    g = efficiency_gain(NS, [0.3, 0.2, 0.1], BASELINE)
    assert g.value == pytest.approx(32 / n_star) and not g.extrapolated


def test_a_model_better_at_its_smallest_n_than_the_baseline_at_its_largest_is_extrapolated():
    # 0.1 at N = 2 with slope -1 down the first segment: N* = 2 * 0.1 / 0.125 = 1.6, EG = 32 / 1.6 = 20
    g = efficiency_gain(NS, [0.1, 0.025, 0.00625], BASELINE)
    assert g.value == pytest.approx(20.0) and g.extrapolated and not g.bound and g.text() == "20 (extrapolated)"
    # 0.01 at N = 2: N* = 0.16, within ten times below the smallest N (0.2)? no: 0.16 < 0.2, so EG is a bound,
    # at least 32 / 0.2 = 160
    g = efficiency_gain(NS, [0.01, 0.0025, 0.000625], BASELINE)
    assert g.value == pytest.approx(160.0) and g.extrapolated and g.bound == ">" and g.text().startswith("> 160")


def test_a_model_that_never_reaches_the_target_is_extrapolated_beyond_its_largest_n():
    # last segment 8 -> 32 from 0.8 to 0.5: slope log(0.625) / log(4); 0.5 -> 0.125 needs log N* = log 32 +
    # log(0.25) / slope
    slope = math.log(0.625) / math.log(4)
    n_star = math.exp(math.log(32) + math.log(0.25) / slope)  # 1910: beyond ten times the largest N (320)
    g = efficiency_gain(NS, [1.0, 0.8, 0.5], BASELINE)
    assert n_star > 320 and g.value == pytest.approx(32 / 320) and g.extrapolated and g.bound == "<"
    # a steeper end segment: 8 -> 32 from 0.5 to 0.2 reaches 0.125 at N* = 32 * (0.125/0.2)^(log 4 / log 0.4), 54.6
    slope = math.log(0.4) / math.log(4)
    n_star = 32 * math.exp(math.log(0.125 / 0.2) / slope)
    g = efficiency_gain(NS, [0.9, 0.5, 0.2], BASELINE)
    assert g.value == pytest.approx(32 / n_star) and g.extrapolated and not g.bound


def test_a_nearly_flat_end_segment_gives_a_bound_not_an_overflow():
    # 8 -> 32 from 0.5 to 0.5 * (1 - 1e-9): N* = exp(log 32 + log(0.25) / slope) is far beyond any float
    g = efficiency_gain(NS, [0.9, 0.5, 0.5 * (1 - 1e-9)], BASELINE)
    assert g.value == pytest.approx(32 / 320) and g.extrapolated and g.bound == "<"
    assert crossing(NS, [0.9, 0.5, 0.5 * (1 - 1e-9)], 0.125) == (math.inf, True)


def test_no_gain_where_the_curve_cannot_say_it():
    assert math.isnan(efficiency_gain(NS, [1.0, 1.0, 1.0], BASELINE).value)  # flat: never reaches the target
    assert math.isnan(efficiency_gain(NS, [0.5, 0.6, 0.7], BASELINE).value)  # rising at its end
    assert math.isnan(efficiency_gain([8], [0.1], [0.2]).value)  # one point: no curve
    assert crossing([2, 8], [0.5, 0.1], 0.5) == (2.0, False)  # the target met at a measured point

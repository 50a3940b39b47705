"""Meta-tests of conformance.judge.metrics: the numbers every verdict rests on."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from conformance.judge import metrics


def test_nan_and_inf_in_the_subject_count_as_infinite_error():
    err = metrics.abs_error(np.array([np.nan, np.inf, 1.0]), np.array([0.0, 0.0, 1.0]))
    assert err.tolist() == [math.inf, math.inf, 0.0]


def test_matching_non_finite_values_are_no_error():
    err = metrics.abs_error(np.array([-np.inf, np.inf]), np.array([-np.inf, np.inf]))
    assert err.tolist() == [0.0, 0.0]


def test_bfloat16_is_compared_after_exact_upcast():
    got = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    assert metrics.abs_error(got, np.array([1.0, 2.0 + 2**-7])).tolist() == [0.0, 2**-7]


def test_stats_name_the_worst_element_and_skip_excluded_rows():
    want = np.zeros((2, 3))
    got = np.array([[0.0, 0.1, 0.0], [5.0, 0.0, 0.2]])
    valid = np.array([[True], [False]])  # row 1 is excluded, its 5.0 must not count
    stats = metrics.error_stats(got, want, valid)
    assert stats.worst_index == (0, 1)
    assert stats.max_abs == 0.1 and stats.worst_got == 0.1 and stats.worst_want == 0.0
    assert math.isclose(stats.mean_abs, 0.1 / 3)
    assert stats.count == 3


def test_stats_of_nothing_compared_are_zero():
    stats = metrics.error_stats(np.ones(3), np.zeros(3), np.zeros(3, dtype=bool))
    assert stats.count == 0 and stats.max_abs == 0.0


def test_fraction_above_threshold():
    assert metrics.fraction_above(np.array([0.0, 0.5, 2.0, 3.0]), np.zeros(4), 1.0) == 0.5
    assert metrics.fraction_above(np.array([np.nan]), np.zeros(1), 1e30) == 1.0


def test_ratio_edge_cases():
    assert metrics.ratio(2.0, 1.0) == 2.0
    assert metrics.ratio(0.0, 0.0) == 0.0
    assert metrics.ratio(1.0, 0.0) == math.inf


def test_magnitude_ignores_non_finite_reference_values():
    assert metrics.magnitude(np.array([-np.inf, -3.0, 1.0])) == (3.0, 2.0)


def test_max_and_mean_are_error_stats_numbers_for_any_answer():
    rng = np.random.default_rng(3)
    want = rng.standard_normal((2, 3, 8, 4))
    valid = rng.random((2, 3, 8, 1)) > 0.3
    nan_answer = want.copy()
    nan_answer[0, 0, 0, 0] = np.nan
    infinite_ref = want.copy()
    infinite_ref[1, 2, 3] = -np.inf  # matched by the answer below: no error there
    for got, ref in (
        (-want, want),
        (np.roll(want, 1, axis=2), want),
        (nan_answer, want),
        (infinite_ref, infinite_ref),
    ):
        for keep in (None, valid):
            stats = metrics.error_stats(got, ref, keep)
            assert metrics.max_and_mean(got, ref, keep) == pytest.approx((stats.max_abs, stats.mean_abs))

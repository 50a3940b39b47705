"""Meta-tests of the tolerance policy: it accepts the baseline's own error and rejects
single outliers (max rule), systematic drift (mean rule) and NaN."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.judge import dtypes, tolerance


@pytest.fixture
def setup():
    rng = np.random.default_rng(0)
    want = rng.standard_normal((2, 4, 64, 32))
    baseline = dtypes.cast(want, "bfloat16")  # the baseline's error is bfloat16 rounding
    return want, baseline


def test_the_baseline_itself_passes_with_ratio_one(setup):
    want, baseline = setup
    judged = tolerance.judge("out", baseline, want, baseline, "bfloat16")
    assert judged.passed
    assert judged.metrics.ratio == 1.0 and judged.metrics.mean_ratio == 1.0
    assert judged.metrics.fraction_out_of_tolerance == 0.0


def test_a_single_outlier_fails_the_max_rule(setup):
    want, baseline = setup
    got = baseline.copy()
    got[1, 2, 3, 4] = want[1, 2, 3, 4] + 1.0
    judged = tolerance.judge("out", got, want, baseline, "bfloat16")
    assert not judged.passed
    assert judged.metrics.worst_index == (1, 2, 3, 4)
    assert judged.metrics.mean_ratio < tolerance.TOLERANCES["out"].k_mean  # the mean alone would miss it
    assert 0 < judged.metrics.fraction_out_of_tolerance < 1e-4
    assert "OUT OF TOLERANCE" in judged.explain() and "[1, 2, 3, 4]" in judged.explain()


def test_systematic_drift_fails_the_mean_rule():
    rng = np.random.default_rng(1)
    want = rng.standard_normal((2, 4, 64, 32))
    baseline = want + 1e-3 * rng.standard_normal(want.shape)  # compute noise: mean error ~ max / 5
    drift = np.abs(baseline - want).max()  # every element off by the baseline's worst error
    judged = tolerance.judge("out", want + drift, want, baseline, "float32")
    assert judged.metrics.max_abs <= judged.metrics.tolerance  # the max rule alone would pass it
    assert not judged.passed


def test_nan_fails_and_reports_where(setup):
    want, baseline = setup
    got = baseline.copy()
    got[0, 0, 0, 0] = np.nan
    judged = tolerance.judge("out", got, want, baseline, "bfloat16")
    assert not judged.passed and judged.metrics.worst_index == (0, 0, 0, 0)


def test_floor_allows_rounding_when_the_baseline_is_exact():
    want = np.linspace(-2, 2, 101)
    exact = want.copy()
    rounded = dtypes.cast(want, "float32").astype(np.float64)  # half an ulp of float32 at most
    assert tolerance.judge("out", rounded, want, exact, "float32").passed
    shifted = want + 2 * dtypes.eps("float32")  # every element off by 2 eps: drift
    assert not tolerance.judge("out", shifted, want, exact, "float32").passed
    assert not tolerance.judge("out", want + 1e-5, want, exact, "float32").passed


def test_excluded_rows_are_not_judged(setup):
    want, baseline = setup
    got = baseline.copy()
    got[:, :, 5] = 1e6
    valid = np.ones(want.shape[:3], dtype=bool)
    valid[:, :, 5] = False
    assert tolerance.judge("out", got, want, baseline, "bfloat16", valid[..., None]).passed


def test_every_tensor_has_a_named_justified_k():
    for name in ("out", "lse", "dq", "dk", "dv", "dbias"):
        rule = tolerance.TOLERANCES[name]
        assert rule.k >= 1 and rule.k_mean >= 1 and len(rule.why) > 20


def test_shape_mismatch_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="shape"):
        tolerance.judge("out", np.zeros((2, 3)), np.zeros((3, 2)), np.zeros((3, 2)), "float32")


def test_one_element_mean_is_judged_like_its_max():
    want = np.array([1.3157])
    baseline = want + 3e-8  # a lucky baseline
    got = dtypes.cast(want, "float32").astype(np.float64) + 1.2e-7  # ~1 ulp off
    judged = tolerance.judge("lse", got, want, baseline, "float32")
    assert judged.passed, judged.explain()


def test_a_zero_reference_takes_its_floor_from_the_cancelling_terms():
    want = np.zeros((1, 1, 1, 64))  # dq when the only key is seen: ds = p (dp - delta) = 0
    baseline = np.zeros_like(want)
    noise = np.full_like(want, 3e-3)  # bfloat16 rounding of delta, carried through scale * k
    assert not tolerance.judge("dq", noise, want, baseline, "bfloat16").passed
    assert tolerance.judge("dq", noise, want, baseline, "bfloat16", cancellation=2.0).passed
    assert not tolerance.judge("dq", noise + 1.0, want, baseline, "bfloat16", cancellation=2.0).passed


def test_cancellation_does_not_loosen_a_nonzero_reference():
    want = np.linspace(1, 2, 64)
    judged = tolerance.judge("dq", want + 1e-3, want, want.copy(), "float32", cancellation=10.0)
    assert not judged.passed


def test_a_judgement_knows_it_can_fail(setup):
    want, baseline = setup
    judged = tolerance.judge("out", baseline, want, baseline, "bfloat16")
    assert judged.weak == ()


def test_a_tolerance_the_zero_answer_meets_is_weak():
    # A one-element gradient in e5m2 (dsinks of one head) whose baseline is 3.6 off: any answer
    # within 6 x 3.6 of the reference passes, zeros and the sign flipped included.
    want = np.array([4.4])
    judged = tolerance.judge("dsinks", np.array([4.0]), want, np.array([8.0]), "float8_e5m2")
    assert judged.passed
    assert judged.weak == ("zeros", "negated")
    assert "not judged" in judged.explain_weak() and "zeros and negated" in judged.explain_weak()


def test_rows_shifted_by_one_is_tried_where_rows_repeat():
    # Every query row the same (a constant q): a kernel that reads its neighbour's row is right.
    row = np.random.default_rng(2).standard_normal(32)
    want = np.broadcast_to(row, (1, 2, 8, 32)).copy()
    want[:, 1] += 1.0  # heads differ
    judged = tolerance.judge("out", want, want, dtypes.cast(want, "bfloat16"), "bfloat16")
    assert judged.weak == ("rows shifted",)


def test_fp8_floor_is_one_ulp_of_the_final_rounding():
    want = np.array([4.4, -3.0])
    floor_max, _ = tolerance.floors("float8_e5m2", want, None)
    assert floor_max == pytest.approx(tolerance.FP8_FLOOR_ULPS * dtypes.eps("float8_e5m2") * 4.4)


def test_fp8_cancellation_floor_is_in_float32_ulps():
    # The splash e5m2 dsinks case: reference 4.4 from terms of magnitude 118 that cancel. The old
    # floor, 2 ulps of e5m2 at 118 (29.4), let -2.0 pass; a float32 sum leaves ulps of float32.
    judged = tolerance.judge(
        "dsinks", np.array([-2.0]), np.array([4.4]), np.array([4.0]), "float8_e5m2", cancellation=118.0
    )
    assert not judged.passed
    zero_ref = tolerance.floors("float8_e5m2", np.zeros(3), None, cancellation=118.0)[0]
    assert zero_ref == pytest.approx(tolerance.FLOOR_ULPS * dtypes.eps("float32") * 118.0)

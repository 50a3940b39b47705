"""The dropout check's binomial test: exact tails, and a false-alarm rate that is what it says."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.judge.binomial import acceptance_range, log_pmf, two_sided_p


def _exact_cdf(k: int, n: int, rate: float) -> float:
    return sum(math.comb(n, i) * rate**i * (1 - rate) ** (n - i) for i in range(k + 1))


@pytest.mark.parametrize(("n", "rate"), [(10, 0.5), (37, 0.25), (200, 0.1)])
def test_the_probabilities_are_the_binomial_ones(n: int, rate: float):
    want = [math.comb(n, i) * rate**i * (1 - rate) ** (n - i) for i in range(n + 1)]
    np.testing.assert_allclose(np.exp(log_pmf(n, rate)), want, rtol=1e-10, atol=1e-300)


def test_the_two_sided_p_doubles_the_smaller_tail():
    assert two_sided_p(3, 10, 0.5) == pytest.approx(2 * _exact_cdf(3, 10, 0.5), rel=1e-12)
    assert two_sided_p(8, 10, 0.5) == pytest.approx(2 * _exact_cdf(2, 10, 0.5), rel=1e-12)
    assert two_sided_p(5, 10, 0.5) == 1.0


def test_a_right_rate_is_rejected_no_more_often_than_the_stated_probability():
    # 20,000 draws of n = 400 at rate 0.25, rejected at alpha = 0.01: at most 1% (+ sampling noise)
    rng = np.random.default_rng(0)
    counts = rng.binomial(400, 0.25, size=20_000)
    low, high = acceptance_range(400, 0.25, 0.01)
    rejected = np.mean((counts < low) | (counts > high))
    assert rejected <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / 20_000)


def test_the_acceptance_range_is_where_the_test_accepts():
    low, high = acceptance_range(65536, 0.25, 1e-6)
    assert two_sided_p(low, 65536, 0.25) >= 1e-6 > two_sided_p(low - 1, 65536, 0.25)
    assert two_sided_p(high, 65536, 0.25) >= 1e-6 > two_sided_p(high + 1, 65536, 0.25)
    assert low < 0.25 * 65536 < high


def test_a_rate_off_by_a_fifth_is_rejected_at_the_checks_size():
    # the rate_off mutant's count on a 2 x 8 x 128 x 128 case
    assert two_sided_p(int(0.2 * 262144), 262144, 0.25) < 1e-6


@pytest.mark.parametrize(("n", "rate"), [(10, 0.0), (10, 1.0), (-1, 0.5)])
def test_a_degenerate_binomial_is_refused(n: int, rate: float):
    with pytest.raises(ValueError, match="binomial needs"):
        log_pmf(n, rate)

"""The exact two-sided binomial test the ``dropout`` check judges a drawn mask's rate with.

Pure functions of counts (standard library and NumPy): a right kernel fails the test with
probability at most the false-alarm bound the caller states, whatever the number of draws, so the
bound is a declared probability and not a band tuned to pass.
"""

from __future__ import annotations

import math

import numpy as np


def log_pmf(n: int, rate: float) -> np.ndarray:
    """``[n + 1]``: log P(X = k) for X ~ Binomial(n, rate), k = 0..n (``0 < rate < 1``)."""
    if not 0.0 < rate < 1.0 or n < 0:
        raise ValueError(f"binomial needs n >= 0 and 0 < rate < 1, got n={n}, rate={rate}")
    # log P(X = 0), then the ratio P(X = k + 1) / P(X = k) = (n - k) / (k + 1) * rate / (1 - rate)
    # summed: n additions in float64, relative error far below the probabilities it is compared at
    k = np.arange(n, dtype=np.float64)
    steps = np.log(n - k) - np.log(k + 1) + (math.log(rate) - math.log1p(-rate))
    return n * math.log1p(-rate) + np.concatenate(([0.0], np.cumsum(steps)))


def two_sided_p(successes: int, n: int, rate: float) -> float:
    """The doubled smaller tail, ``min(1, 2 min(P(X <= s), P(X >= s)))`` for X ~ Binomial(n, rate):
    the probability, under ``rate``, of a count at least as far out as ``successes`` on its side
    (at most doubled). Rejecting where it is below ``alpha`` rejects a right kernel with
    probability at most ``alpha``."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside [0, {n}]")
    pmf = np.exp(log_pmf(n, rate))
    lower, upper = float(pmf[: successes + 1].sum()), float(pmf[successes:].sum())
    return min(1.0, 2.0 * min(lower, upper))


def acceptance_range(n: int, rate: float, alpha: float) -> tuple[int, int]:
    """The counts ``s`` that ``two_sided_p(s, n, rate) >= alpha`` accepts, as ``(low, high)``: what a
    failure's message shows beside the count seen."""
    pmf = np.exp(log_pmf(n, rate))
    lower, upper = np.cumsum(pmf), np.cumsum(pmf[::-1])[::-1]
    accepted = np.nonzero(np.minimum(1.0, 2.0 * np.minimum(lower, upper)) >= alpha)[0]
    return int(accepted[0]), int(accepted[-1])

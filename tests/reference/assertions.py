"""Closeness checks that say where and how badly they failed.

The criterion is one combined abs/rel rule, ``|actual - expected| <= rtol * (|expected| + scale)``
with ``scale = max(max |expected|, floor)`` over the tensor: an element is judged relative to
itself and to the tensor's magnitude, so entries that cancel to near zero (gradients often
do) are not held to an impossible relative bound. ``floor`` (default 1, the size of the test
inputs) covers tensors that are exactly zero but computed as a difference of O(1) terms,
e.g. dq when every row sees a single key. Infinite expected entries (``lse`` on fully
masked rows) must match exactly.
"""

from __future__ import annotations

import mpmath
import numpy as np


def _errors(actual: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|actual - expected| and |expected| as float64, computing the difference in mpmath when needed."""
    if expected.dtype == object or actual.dtype == object:
        pairs = zip(actual.ravel(), expected.ravel(), strict=True)
        err = np.array([float(abs(mpmath.mpf(a) - mpmath.mpf(e))) for a, e in pairs]).reshape(expected.shape)
        mag = np.array([float(abs(e)) for e in expected.ravel()]).reshape(expected.shape)
        return err, mag
    expected = expected.astype(np.float64)
    return np.abs(actual - expected), np.abs(expected)


def assert_close(
    actual: np.ndarray, expected: np.ndarray, rtol: float, name: str, floor: float = 1.0
) -> None:
    """Assert ``actual`` matches ``expected`` (either float or an mpf object array) under the rule above."""
    assert actual is not None and expected is not None, f"{name}: missing ({actual!r} vs {expected!r})"
    exact_actual = np.asarray(actual)
    actual = exact_actual.astype(np.float64)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != expected {expected.shape}"
    exp_float = expected.astype(np.float64)
    inf = np.isinf(exp_float)
    bad_inf = inf & (actual != exp_float)
    assert not bad_inf.any(), (
        f"{name}: expected infinities at {np.argwhere(bad_inf)[:5].tolist()}, got "
        f"{actual[bad_inf][:5].tolist()} (expected {exp_float[bad_inf][:5].tolist()})"
    )
    assert not np.isnan(actual).any(), f"{name}: NaN at {np.argwhere(np.isnan(actual))[:5].tolist()}"
    finite = ~inf
    unexpected_inf = finite & ~np.isfinite(actual)
    assert not unexpected_inf.any(), f"{name}: unexpected inf at {np.argwhere(unexpected_inf)[:5].tolist()}"
    if not finite.any():
        return
    err, mag = _errors(np.where(finite, exact_actual, 0), np.where(finite, expected, 0))
    scale = max(mag.max(), floor)
    allowed = rtol * (mag + scale)
    failing = finite & (err > allowed)
    if failing.any():
        ratio = np.where(finite, err / np.maximum(allowed, np.finfo(float).tiny), 0.0)
        worst = np.unravel_index(np.argmax(ratio), ratio.shape)
        raise AssertionError(
            f"{name}: {failing.sum()} of {finite.sum()} elements ({failing.sum() / finite.sum():.1%}) "
            f"off by more than "
            f"rtol={rtol:g} x (|expected| + {scale:.3g}); worst at {tuple(int(x) for x in worst)}: "
            f"actual {actual[worst]!r}, expected {exp_float[worst]!r}, error {err[worst]:.3g} "
            f"= {ratio[worst]:.3g} x allowed"
        )

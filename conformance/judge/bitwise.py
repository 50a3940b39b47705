"""Bitwise comparison of two outputs of the same computation: the verdict of the checks that
hold a subject to its own earlier answer (``determinism``: a rerun; ``batch_invariance``: the
same request alone), where no tolerance applies because the math did not change."""

from __future__ import annotations

import numpy as np


def bitwise_diff(
    name: str,
    a: np.ndarray | None,
    b: np.ndarray | None,
    between: str = "two runs on the same inputs",
    pair: str = "{a} then {b}",
) -> str | None:
    """None when ``a`` and ``b`` hold the same bytes (both absent too); otherwise one line naming
    how many elements differ ``between`` the two calls, the largest difference, and the first
    element that differs, its two values written by ``pair`` (e.g. "{a} in the batch, {b} alone").

    Elements are counted as differing by value (NaN matches NaN). A tensor whose values all
    match while its bytes do not (-0.0 against 0.0, another NaN payload) still differs, and
    is named as such: bitwise means bitwise."""
    if a is None and b is None:
        return None
    if a is None or b is None or np.shape(a) != np.shape(b):
        return f"{name}: present or shaped differently between {between}"
    if np.asarray(a).tobytes() == np.asarray(b).tobytes():
        return None
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    differ = ~((a64 == b64) | (np.isnan(a64) & np.isnan(b64)))
    if not differ.any():
        # The same values, other bits: a signed zero or a NaN payload (no value differs).
        return (
            f"{name}: equal values but different bits between {between} (a zero's sign or a NaN's "
            "payload differs)"
        )
    where = tuple(int(i) for i in np.argwhere(differ)[0])
    with np.errstate(invalid="ignore"):
        biggest = float(np.nanmax(np.abs(a64 - b64)))
    return (
        f"{name}: {int(differ.sum())} of {differ.size} elements differ between {between} "
        f"(max difference {biggest:.3g}); first at {list(where)}: "
        + pair.format(a=repr(float(a64[where])), b=repr(float(b64[where])))
    )

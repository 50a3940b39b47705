"""What a subject does where the canonical semantics leave it open (docs/semantics.md,
"Observed behaviour"). Checks that accept any behaviour still record which one they saw,
so an upgrade that changes it shows in the gate as a behaviour change.

Pure functions of arrays; each returns one class name, or several joined by ``+`` in
sorted order when rows disagree (e.g. ``mean_v+nan``).
"""

from __future__ import annotations

import numpy as np

from conformance.judge.dtypes import eps

# Classes of a fully masked row's output.
ZEROS, MEAN_V, PARTIAL_MEAN_V, NAN, INF, OTHER = "zeros", "mean_v", "partial_mean_v", "nan", "inf", "other"


def _join(classes: set[str]) -> str:
    return "+".join(sorted(classes)) if classes else "none"


def fully_masked_out(out: np.ndarray, rows: np.ndarray, v: np.ndarray, dtype: str) -> str:
    """Classify the output rows that see no key.

    out: [B, Hq, Sq, Dv] (any float dtype); rows: [B, Hq, Sq] bool; v: [B, Hkv, Sk, Dv] as the
    subject received it. ``mean_v``: the mean of V over all keys (what additive finite masking
    gives); ``partial_mean_v``: inside the range of V's rows but not their full mean (a mean over
    the key blocks a kernel happened to visit); ``zeros``, ``nan``, ``inf``, else ``other``.
    """
    out = np.asarray(out, dtype=np.float64)
    values = np.asarray(v, dtype=np.float64)
    group = out.shape[1] // values.shape[1]
    per_head = np.repeat(values, group, axis=1)  # [B, Hq, Sk, Dv]: each query head's kv head
    mean, low, high = per_head.mean(axis=2), per_head.min(axis=2), per_head.max(axis=2)
    scale = max(1.0, float(np.abs(values).max(initial=0.0)))
    tolerance = 8 * eps(dtype) * scale
    classes = set()
    for b, h, q in np.argwhere(rows):
        row = out[b, h, q]
        if np.isnan(row).all():
            classes.add(NAN)
        elif not np.isfinite(row).all():
            classes.add(INF if not np.isnan(row).any() else OTHER)
        elif (row == 0).all():
            classes.add(ZEROS)
        elif np.abs(row - mean[b, h]).max() <= tolerance:
            classes.add(MEAN_V)
        elif (row >= low[b, h] - tolerance).all() and (row <= high[b, h] + tolerance).all():
            classes.add(PARTIAL_MEAN_V)
        else:
            classes.add(OTHER)
    return _join(classes)


def fully_masked_lse(lse: np.ndarray, rows: np.ndarray) -> str:
    """Classify the lse of rows that see no key: ``-inf`` (the exact answer), ``nan``, ``+inf``,
    ``very_negative`` (a finite mask value such as -0.7 * float32 max, plus a log), ``finite``."""
    values = np.asarray(lse, dtype=np.float64)[rows]
    classes = set()
    for value in values.ravel():
        if np.isnan(value):
            classes.add("nan")
        elif value == -np.inf:
            classes.add("-inf")
        elif value == np.inf:
            classes.add("+inf")
        elif value < -1e30:
            classes.add("very_negative")
        else:
            classes.add("finite")
    return _join(classes)


def masked_nonfinite(out: np.ndarray, fully_masked: np.ndarray) -> str:
    """Where NaN written into masked-out inputs ended up: ``contained`` (nowhere), ``fully_masked_rows``
    (only in rows that see no key, whose value is open), ``rows_that_see_keys`` (a defect)."""
    bad_rows = ~np.isfinite(np.asarray(out, dtype=np.float64)).all(axis=-1)
    if (bad_rows & ~fully_masked).any():
        return "rows_that_see_keys"
    if (bad_rows & fully_masked).any():
        return "fully_masked_rows"
    return "contained"

"""The classes of observed behaviour (conformance/judge/behaviour.py) on hand-made arrays."""

from __future__ import annotations

import numpy as np

from conformance.judge import behaviour


def _setup():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((1, 1, 8, 4))
    rows = np.zeros((1, 2, 3), bool)
    rows[0, :, 0] = True  # row 0 of both query heads (GQA 2 on one kv head) sees no key
    out = rng.standard_normal((1, 2, 3, 4))
    return v, rows, out


def test_each_class_of_a_fully_masked_row():
    v, rows, out = _setup()
    cases = {
        "zeros": np.zeros(4),
        "mean_v": v[0, 0].mean(axis=0),
        "partial_mean_v": v[0, 0, :4].mean(axis=0),
        "nan": np.full(4, np.nan),
        "inf": np.full(4, np.inf),
        "other": v[0, 0].max(axis=0) + 1,
    }
    for expected, row in cases.items():
        got = out.copy()
        got[0, :, 0] = row
        assert behaviour.fully_masked_out(got, rows, v, "float32") == expected


def test_rows_that_disagree_are_joined_in_a_stable_order():
    v, rows, out = _setup()
    out[0, 0, 0], out[0, 1, 0] = np.nan, 0.0
    assert behaviour.fully_masked_out(out, rows, v, "float32") == "nan+zeros"


def test_mean_v_allows_the_output_dtype_rounding_only():
    v, rows, out = _setup()
    out[0, :, 0] = v[0, 0].mean(axis=0) + 1e-3
    assert behaviour.fully_masked_out(out, rows, v, "bfloat16") == "mean_v"
    assert behaviour.fully_masked_out(out, rows, v, "float32") == "partial_mean_v"


def test_lse_and_masked_nonfinite_classes():
    rows = np.array([[[True, True, False]]])
    assert behaviour.fully_masked_lse(np.array([[[-np.inf, -np.inf, 1.0]]]), rows) == "-inf"
    assert behaviour.fully_masked_lse(np.array([[[-2e38, np.nan, 1.0]]]), rows) == "nan+very_negative"
    out = np.zeros((1, 1, 3, 2))
    assert behaviour.masked_nonfinite(out, rows) == "contained"
    out[0, 0, 0] = np.nan
    assert behaviour.masked_nonfinite(out, rows) == "fully_masked_rows"
    out[0, 0, 2] = np.nan
    assert behaviour.masked_nonfinite(out, rows) == "rows_that_see_keys"

"""Meta-tests: the helpers that judge the reference must themselves be able to fail.

A shared mistake between ``prose_masks`` and ``reference/masks.py`` would pass every
agreement test, so the prose masks are also pinned to matrices written out by hand
from docs/semantics.md.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from reference import AttentionInputs, AttentionSpec
from tests.reference import mp_oracle
from tests.reference.assertions import assert_close
from tests.reference.profiles import profiled
from tests.reference.prose_masks import visibility


def _inputs(sq: int, sk: int, **fields: np.ndarray) -> AttentionInputs:
    return AttentionInputs(
        q=np.zeros((1, 1, sq, 1)), k=np.zeros((1, 1, sk, 1)), v=np.zeros((1, 1, sk, 1)), **fields
    )


HAND_WRITTEN = {
    "causal-top_left-2x4": (
        AttentionSpec(causal=True, alignment="top_left"),
        2,
        4,
        [[1, 0, 0, 0], [1, 1, 0, 0]],
    ),
    "causal-bottom_right-2x4": (
        AttentionSpec(causal=True, alignment="bottom_right"),
        2,
        4,
        [[1, 1, 1, 0], [1, 1, 1, 1]],
    ),
    "causal-bottom_right-3x2-first-row-dead": (
        AttentionSpec(causal=True, alignment="bottom_right"),
        3,
        2,
        [[0, 0], [1, 0], [1, 1]],
    ),
    "window-1-0-inclusive": (AttentionSpec(window=(1, 0)), 3, 3, [[1, 0, 0], [1, 1, 0], [0, 1, 1]]),
    "window-0-0-diagonal-bottom_right": (
        AttentionSpec(window=(0, 0), alignment="bottom_right"),
        2,
        3,
        [[0, 1, 0], [0, 0, 1]],
    ),
    "window-None-1": (AttentionSpec(window=(None, 1)), 2, 4, [[1, 1, 0, 0], [1, 1, 1, 0]]),
    "chunk-2-top_left-4x4": (
        AttentionSpec(causal=True, chunk=2),
        4,
        4,
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]],
    ),
    "chunk-1-diagonal-only": (AttentionSpec(causal=True, chunk=1), 3, 3, [[1, 0, 0], [0, 1, 0], [0, 0, 1]]),
    # 3 does not divide 4: keys 0-2, then a short chunk of key 3.
    "chunk-3-bottom_right-2x4": (
        AttentionSpec(causal=True, chunk=3, alignment="bottom_right"),
        2,
        4,
        [[1, 1, 1, 0], [0, 0, 0, 1]],
    ),
    # Query 2's diagonal (key 2) is in chunk 1, which holds no key of a 2-key sequence.
    "chunk-2-top_left-3x2-last-row-dead": (
        AttentionSpec(causal=True, chunk=2),
        3,
        2,
        [[1, 0], [1, 1], [0, 0]],
    ),
    "chunk-longer-than-both-is-causal": (
        AttentionSpec(causal=True, chunk=5, alignment="bottom_right"),
        2,
        3,
        [[1, 1, 0], [1, 1, 1]],
    ),
}


@pytest.mark.parametrize("spec, sq, sk, expected", HAND_WRITTEN.values(), ids=HAND_WRITTEN.keys())
def test_prose_masks_match_hand_written_matrices(
    spec: AttentionSpec, sq: int, sk: int, expected: list
) -> None:
    np.testing.assert_array_equal(visibility(spec, _inputs(sq, sk))[0, 0], np.array(expected, dtype=bool))


def test_prose_masks_padding_segments_and_neg_inf_bias() -> None:
    inputs = _inputs(
        3,
        3,
        q_segment_ids=np.array([[0, 0, 1]]),
        kv_segment_ids=np.array([[0, 1, 1]]),
        q_lengths=np.array([2]),
        kv_lengths=np.array([2]),
        bias=np.array([[[[-np.inf, 0, 0], [0, 0, 0], [0, 0, 0]]]]),
    )
    # Row 0 sees key 0 by segment but the bias removes it; row 1 sees key 0; row 2 is padding.
    expected = [[0, 0, 0], [1, 0, 0], [0, 0, 0]]
    np.testing.assert_array_equal(visibility(AttentionSpec(), inputs)[0, 0], np.array(expected, dtype=bool))


def test_mp_oracle_on_answers_known_by_hand() -> None:
    k = np.array([[[[1.0], [1.0], [3.0]]]])
    v = np.array([[[[2.0], [4.0], [8.0]]]])
    q = np.array([[[[0.0], [1.0]]]])
    mask = np.array([[[[True, True, False], [False, False, True]]]])
    res = mp_oracle.attention(AttentionSpec(scale=1.0), AttentionInputs(q=q, k=k, v=v, mask=mask))
    assert res.out[0, 0, 0, 0] == 3  # equal logits: the mean of 2 and 4
    with mpmath.workdps(mp_oracle.DIGITS):
        assert abs(res.lse[0, 0, 0] - mpmath.log(2)) < mpmath.mpf(10) ** -35
    assert res.out[0, 0, 1, 0] == 8  # one visible key: its value row
    assert res.lse[0, 0, 1] == 3


def test_assert_close_passes_within_and_fails_beyond_the_tolerance() -> None:
    expected = np.array([1.0, -2.0, 0.5])
    assert_close(expected + 1e-14, expected, 1e-13, "x")
    with pytest.raises(AssertionError, match=r"x: 1 of 3 elements .* worst at \(1,\)"):
        assert_close(expected + np.array([0, 1e-11, 0]), expected, 1e-13, "x")


def test_assert_close_compares_mpf_exactly_beyond_float64() -> None:
    with mpmath.workdps(40):
        third = mpmath.mpf(1) / 3
        expected = np.array([third], dtype=object)
        assert_close(np.array([third], dtype=object), expected, 1e-35, "x")
        with pytest.raises(AssertionError):
            assert_close(np.array([third + mpmath.mpf(10) ** -30], dtype=object), expected, 1e-35, "x")


@pytest.mark.parametrize(
    "actual, expected",
    [
        ([-math.inf, 1.0], [0.0, 1.0]),  # inf where a finite value belongs
        ([0.0, 1.0], [-math.inf, 1.0]),  # finite where -inf belongs
        ([math.inf, 1.0], [-math.inf, 1.0]),  # wrong sign of infinity
        ([math.nan, 1.0], [0.0, 1.0]),
    ],
)
def test_assert_close_rejects_misplaced_infinities_and_nan(actual: list, expected: list) -> None:
    with pytest.raises(AssertionError):
        assert_close(np.array(actual), np.array(expected), 1e-13, "lse")


def test_assert_close_rejects_a_missing_tensor() -> None:
    with pytest.raises(AssertionError, match="missing"):
        assert_close(None, np.zeros(2), 1e-13, "dbias")


@pytest.mark.parametrize(
    "name, derandomize, examples", [("ci", True, 7), ("dev", False, 7), ("thorough", False, 70)]
)
def test_profiles_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, name: str, derandomize: bool, examples: int
) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", name)
    chosen = profiled(7)
    assert chosen.derandomize is derandomize
    assert chosen.max_examples == examples
    assert chosen.deadline is None


def test_an_unknown_profile_is_an_error_not_a_silent_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "nightly-typo")
    with pytest.raises(ValueError, match="not a registered profile"):
        profiled(7)

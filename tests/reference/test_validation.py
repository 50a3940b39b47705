"""Impossible inputs raise ValueError, and the message names what is wrong."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from reference import AttentionInputs, AttentionSpec, attention_backward, attention_forward

B, HQ, HKV, SQ, SK, D, DV = 2, 4, 2, 3, 5, 4, 3


def good() -> AttentionInputs:
    rng = np.random.default_rng(0)
    return AttentionInputs(
        q=rng.standard_normal((B, HQ, SQ, D)),
        k=rng.standard_normal((B, HKV, SK, D)),
        v=rng.standard_normal((B, HKV, SK, DV)),
    )


def with_(**fields: object) -> Callable[[], AttentionInputs]:
    return lambda: dataclasses.replace(good(), **fields)


ids = np.zeros((B, SQ), dtype=int), np.zeros((B, SK), dtype=int)
BAD_INPUTS = {
    "q-not-4d": (with_(q=np.zeros((HQ, SQ, D))), r"q must be 4-D"),
    "v-not-4d": (with_(v=np.zeros((B, HKV, SK))), r"v must be 4-D"),
    "batch-mismatch": (with_(k=np.zeros((B + 1, HKV, SK, D))), r"batch sizes differ"),
    "hq-not-multiple-of-hkv": (
        with_(q=np.zeros((B, 3, SQ, D))),
        r"q heads 3 is not a multiple of kv heads 2",
    ),
    "zero-kv-heads": (
        with_(k=np.zeros((B, 0, SK, D)), v=np.zeros((B, 0, SK, DV))),
        r"not a multiple of kv heads 0",
    ),
    "head-dim-mismatch": (with_(k=np.zeros((B, HKV, SK, D + 1))), r"q head_dim 4 != k head_dim 5"),
    "k-v-heads-differ": (with_(v=np.zeros((B, 1, SK, DV))), r"must share heads and length"),
    "k-v-lengths-differ": (with_(v=np.zeros((B, HKV, SK + 1, DV))), r"must share heads and length"),
    "empty-sequence": (
        with_(k=np.zeros((B, HKV, 0, D)), v=np.zeros((B, HKV, 0, DV))),
        r"every dimension must be >= 1",
    ),
    "bias-not-broadcastable": (
        with_(bias=np.zeros((1, 1, SQ + 1, SK))),
        r"bias of shape \(1, 1, 4, 5\) does not broadcast",
    ),
    "bias-wrong-heads": (with_(bias=np.zeros((1, HKV, 1, 1))), r"bias of shape .* does not broadcast"),
    "bias-not-4d": (with_(bias=np.zeros((SQ, SK))), r"bias must be 4-D"),
    "mask-not-broadcastable": (
        with_(mask=np.ones((B, 1, SK, SQ), dtype=bool)),
        r"mask of shape .* does not broadcast",
    ),
    "mask-not-4d": (with_(mask=np.ones((SQ, SK), dtype=bool)), r"mask must be 4-D"),
    "mask-not-bool": (with_(mask=np.ones((1, 1, SQ, SK), dtype=int)), r"mask must be boolean"),
    "only-q-segment-ids": (with_(q_segment_ids=ids[0]), r"give both q_segment_ids and kv_segment_ids"),
    "only-kv-segment-ids": (with_(kv_segment_ids=ids[1]), r"give both q_segment_ids and kv_segment_ids"),
    "segment-ids-swapped": (
        with_(q_segment_ids=ids[1], kv_segment_ids=ids[0]),
        r"segment ids must be \[B, Sq\]",
    ),
    "q-lengths-too-long": (with_(q_lengths=np.array([SQ, SQ + 1])), r"q_lengths must lie in \[0, 3\]"),
    "kv-lengths-negative": (with_(kv_lengths=np.array([-1, SK])), r"kv_lengths must lie in \[0, 5\]"),
    "kv-lengths-wrong-shape": (with_(kv_lengths=np.array([SK])), r"kv_lengths must be \[B\]"),
    "q-lengths-not-1d": (with_(q_lengths=np.full((B, 1), SQ)), r"q_lengths must be \[B\]"),
}


@pytest.mark.parametrize("make, message", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_inputs_raise_naming_the_problem(make: Callable[[], AttentionInputs], message: str) -> None:
    inputs = make()
    with pytest.raises(ValueError, match=message):
        attention_forward(inputs)
    with pytest.raises(ValueError, match=message):
        attention_backward(inputs, np.zeros((B, HQ, SQ, DV)))


def test_the_valid_baseline_runs() -> None:
    """The bad cases differ from this one in one field each: their error is that field's."""
    inputs = dataclasses.replace(
        good(),
        bias=np.zeros((1, HQ, 1, SK)),
        mask=np.ones((B, 1, SQ, SK), dtype=bool),
        q_segment_ids=ids[0],
        kv_segment_ids=ids[1],
        q_lengths=np.array([0, SQ]),
        kv_lengths=np.array([SK, 0]),
    )
    attention_backward(inputs, np.zeros((B, HQ, SQ, DV)))


def test_dout_of_the_wrong_shape_raises() -> None:
    with pytest.raises(ValueError, match=r"dout must have out's shape \(2, 4, 3, 3\)"):
        attention_backward(good(), np.zeros((B, HQ, SQ, D + 1)))


BAD_SPECS = {
    "unknown-alignment": (dict(alignment="center"), r"unknown alignment 'center'"),
    "zero-softcap": (dict(softcap=0.0), r"softcap must be positive"),
    "negative-softcap": (dict(softcap=-1.0), r"softcap must be positive"),
    "negative-left-window": (dict(window=(-1, 0)), r"window left edge must be >= 0"),
    "negative-right-window": (dict(window=(None, -2)), r"window right edge must be >= 0"),
    "zero-chunk": (dict(causal=True, chunk=0), r"chunk must be a positive number of keys"),
    "bool-chunk": (dict(causal=True, chunk=True), r"chunk must be a positive number of keys"),
    "chunk-without-causal": (dict(chunk=64), r"chunk needs causal=True"),
}


@pytest.mark.parametrize("fields, message", BAD_SPECS.values(), ids=BAD_SPECS.keys())
def test_bad_specs_raise_naming_the_problem(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AttentionSpec(**fields)

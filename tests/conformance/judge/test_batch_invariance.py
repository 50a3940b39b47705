"""The batch_invariance check and what it stands on: a request cut out of a case (``Case.request``,
``inputs.request_inputs``), the shared bitwise diff, and the sample of batched cases it runs on."""

from __future__ import annotations

import numpy as np

from conformance.judge.bitwise import bitwise_diff
from conformance.judge.checks.batch import ONE_REQUEST
from conformance.judge.inputs import build_inputs, request_inputs
from conformance.judge.runner import run_check
from conformance.plan import catalogue, profiles
from conformance.plan.cases import Case
from kernels.contract import features
from tests.support import toy_subjects
from tests.support.fakes import FULL, subject

HERE = "tests.conformance.judge.test_batch_invariance"
PADDED = Case(
    "toy", "float32", batch=3, q_len=128, kv_len=128, q_lengths=(128, 60, 100), kv_lengths=(100, 0, 77)
)


def batch_mixing(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
    """Right within rounding, but every request's out moves with the batch's mean (a shared statistic)."""
    out, lse = toy_subjects.exact(
        q, k, v, scale=scale, causal=causal, alignment=alignment, q_lengths=q_lengths, kv_lengths=kv_lengths
    )
    shift = np.float32(1e-5) * np.abs(q).mean(dtype=np.float32)  # a neighbour changes it
    return (out * (np.float32(1) + shift)).astype(out.dtype), lse


batch_mixing.attention_capabilities = toy_subjects.CAPS


def test_a_request_is_its_own_lengths_and_its_rows_of_every_batched_array():
    case = Case("s", "float32", batch=3, segments=2, bias="b1qk", mask="1h1k", kv_lengths=(5, 60, 128))
    alone = case.request(2)
    assert (alone.batch, alone.kv_lengths, alone.q_lengths) == (1, (128,), None)
    inputs = build_inputs(case)
    cut = request_inputs(case, inputs, 2)
    for name in ("q", "k", "v", "bias", "q_segment_ids", "kv_segment_ids", "kv_lengths"):
        assert np.array_equal(getattr(cut, name), getattr(inputs, name)[2:3], equal_nan=True), name
    assert cut.mask is inputs.mask  # broadcast over the batch: every request's own already
    assert cut.shape.batch == 1


def test_a_storage_whose_scale_spans_the_batch_is_another_input_alone():
    assert features.not_per_request(Case("s", "float32", batch=2, kv_storage="int8")) == []
    (why,) = features.not_per_request(Case("s", "float32", batch=2, kv_storage="int8_per_channel"))
    assert "spans the batch" in why


def test_the_exact_subject_is_batch_invariant_and_a_batch_statistic_is_not():
    outcome = run_check(PADDED, "batch_invariance", impl=f"{toy_subjects.__name__}:exact")
    assert outcome.verdict == "pass" and "request 2 of 3 alone: out, lse bitwise identical" in outcome.reason
    outcome = run_check(PADDED, "batch_invariance", impl=f"{HERE}:batch_mixing")
    assert outcome.verdict == "fail"
    assert "out: " in outcome.reason and "in the batch of 3 and alone" in outcome.reason
    assert "lse" not in outcome.reason  # only what differs is named


def test_one_request_is_unsupported_with_the_reason():
    outcome = run_check(
        Case("toy", "float32", batch=1), "batch_invariance", impl=f"{toy_subjects.__name__}:exact"
    )
    assert (outcome.verdict, outcome.reason) == ("unsupported", ONE_REQUEST)


def test_the_bitwise_diff_names_values_and_bits():
    a = np.array([0.0, 1.0, 2.0], np.float32)
    assert bitwise_diff("out", a, a.copy()) is None
    signed = bitwise_diff("out", a, np.array([-0.0, 1.0, 2.0], np.float32))
    assert "equal values but different bits" in signed  # no value differs: it raised IndexError before
    moved = bitwise_diff("out", a, np.array([0.0, 1.0, 2.5], np.float32), "x and y", "{a} in x, {b} in y")
    assert "1 of 3 elements differ between x and y" in moved and "first at [2]: 2.0 in x, 2.5 in y" in moved


def test_the_sample_takes_batched_cases_with_per_request_inputs_first():
    plan = catalogue.plan((subject("full", FULL),), profiles.get("ci"), draw_seed=0)
    items = [p for p in plan["batch_invariance"] if p.case.subject == "full"]
    assert len(items) == profiles.get("ci").runtime_cases_per_dtype * len(FULL.dtypes)
    assert all(p.case.batch >= 2 and p.status == "run" for p in items)
    assert all(catalogue._distinct_requests(p.case) for p in items)


def test_a_subject_without_a_batched_case_gets_one_unsupported_item():
    one = catalogue.Planned("batch_invariance", Case("s", "float32"), "run")
    (item,) = catalogue.SAMPLES["batched_sample"]([one], profiles.get("ci"))
    assert (item.status, item.reason) == ("unsupported", catalogue.NO_BATCHED_CASE)

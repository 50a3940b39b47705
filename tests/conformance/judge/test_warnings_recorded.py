"""A subject's warnings reach its records: those raised while it was resolved and those of the
case's calls, each distinct one once, under ``availability.warnings``; none, no key."""

from __future__ import annotations

import dataclasses
import warnings

from conformance.judge.runner import Runner
from conformance.plan.cases import Case
from conformance.plan.catalogue import classify
from conformance.plan.profiles import get
from conformance.plan.subjects import Subject
from kernels.adapters.function_adapter import FunctionAdapter
from run_records.results_file import WARNINGS
from tests.support import toy_subjects

CASE = Case("warns", "float32", batch=1, q_heads=1, kv_heads=1, q_len=16, kv_len=16)


def warns_every_call(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
    """``toy_subjects.exact`` after the same FutureWarning, twice."""
    for _ in range(2):
        warnings.warn("warns_every_call: the default will change", FutureWarning, stacklevel=2)
    return toy_subjects.exact(
        q, k, v, scale=scale, causal=causal, alignment=alignment, q_lengths=q_lengths, kv_lengths=kv_lengths
    )


warns_every_call.attention_capabilities = toy_subjects.CAPS


def _record(fn, resolved: tuple[str, ...] = (), check: str = "forward"):
    adapter = FunctionAdapter.wrap(fn, "warns")
    subject = Subject("warns", "warns", adapter, adapter.availability(), adapter.capabilities(), resolved)
    planned = classify(check, dataclasses.replace(CASE, subject="warns"), subject.capabilities)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the capture passes them on: not this test's concern
        return Runner((subject,), get("ci"), shrink=False).evaluate(planned)


def test_a_warning_in_the_call_is_recorded_once_with_the_one_from_resolving_first():
    record = _record(warns_every_call, resolved=("DeprecationWarning: its module moved",))
    assert record.verdict == "pass"
    assert record.availability[WARNINGS] == [
        "DeprecationWarning: its module moved",
        "FutureWarning: warns_every_call: the default will change",
    ]


def test_a_subject_that_warns_nowhere_has_no_warnings_key():
    assert WARNINGS not in _record(toy_subjects.exact).availability


def test_a_check_planned_unsupported_still_carries_the_warnings_from_resolving():
    record = _record(warns_every_call, resolved=("DeprecationWarning: its module moved",), check="backward")
    assert record.verdict == "unsupported"
    assert record.availability[WARNINGS] == ["DeprecationWarning: its module moved"]

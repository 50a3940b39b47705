"""Attention sinks as a case dimension: ids, inputs, planning, user cases, draws, and the
backward check on subjects with and without d(sinks)."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from conformance.judge.artifacts import Oracle
from conformance.judge.checks import numeric
from conformance.judge.checks.base import CheckContext
from conformance.judge.inputs import build_inputs
from conformance.plan import edge_matrix, profiles, strategies
from conformance.plan.cases import Case
from conformance.plan.catalogue import has_fully_masked_rows
from conformance.plan.user_cases import CaseSyntaxError, parse_case
from kernels.contract.base import Capabilities, SubjectGrads
from tests.support.fakes import FULL

EXTREME = Case("a", "float32", q_heads=3, kv_heads=3, sinks="extreme")


def test_the_case_id_and_features_name_the_sinks():
    assert EXTREME.case_id == "a-float32-sink_extreme-B1-Hq3-Hkv3-Sq128-Sk128-D64"
    assert "-sink-" in dataclasses.replace(EXTREME, sinks="normal").case_id
    assert "sinks" in EXTREME.features and "sinks" not in dataclasses.replace(EXTREME, sinks=None).features
    with pytest.raises(ValueError, match="unknown sink kind 'huge'"):
        Case("a", "float32", sinks="huge")


def test_sinks_are_drawn_per_query_head_from_the_seed_in_the_subject_dtype():
    inputs = build_inputs(EXTREME)
    assert inputs.sinks.shape == (3,) and inputs.sinks.dtype == np.float32
    assert inputs.sinks[0] == 30.0 and inputs.sinks[1] == -1e4 and -10 < inputs.sinks[2] < 20
    other = build_inputs(dataclasses.replace(EXTREME, subject="b"))
    np.testing.assert_array_equal(inputs.sinks, other.sinks)  # every subject sees the same sinks
    assert build_inputs(EXTREME, salt=1).sinks[2] != inputs.sinks[2]
    bf16 = build_inputs(dataclasses.replace(EXTREME, dtype="bfloat16"))
    assert bf16.sinks.dtype.name == "bfloat16"


def test_rows_that_see_no_key_are_not_fully_masked_with_sinks():
    orphan = Case("a", "float32", batch=2, segments=3, orphan_segment=True)
    assert has_fully_masked_rows(orphan)
    assert not has_fully_masked_rows(dataclasses.replace(orphan, sinks="normal"))


def test_the_edge_matrix_has_a_handful_of_small_sink_cases_in_ci():
    sinks = [c for c in edge_matrix.edge_cases(0) if c.sinks is not None]
    assert 3 <= len(sinks) <= 5
    assert all(c.q_len == c.kv_len == 128 and c.head_dim == 64 for c in sinks)
    assert {"extreme", "normal"} == {c.sinks for c in sinks}
    assert any(c.causal for c in sinks) and any(c.kv_heads < c.q_heads for c in sinks)
    assert any(c.orphan_segment for c in sinks)


def test_user_cases_take_sinks():
    assert parse_case("Hq=2,Hkv=2,sinks=extreme", ("float32",)).sinks == "extreme"
    assert parse_case("sinks=no", ("float32",)).sinks is None
    with pytest.raises(CaseSyntaxError, match="sinks='big': use normal, extreme or no"):
        parse_case("sinks=big", ("float32",))


def test_draws_carry_sinks_only_where_declared():
    profile = profiles.get("dev")
    without = strategies.draw_cases(strategies.cases("s", FULL, profile), 30, 0)
    assert all(c.sinks is None for c in without)
    declared = dataclasses.replace(FULL, sinks=True)
    drawn = strategies.draw_cases(strategies.cases("s", declared, profile), 30, 0)
    assert {c.sinks for c in drawn} >= {"normal", "extreme"}


def _backward(case: Case, caps: Capabilities, dsinks_sign: float) -> numeric.Outcome:
    """The backward check on a subject that returns the exact gradients, d(sinks) times a sign."""
    oracle = Oracle(case)
    ref = oracle.reference_grads
    grads = SubjectGrads(dq=ref.dq, dk=ref.dk, dv=ref.dv, dsinks=dsinks_sign * ref.dsinks)
    run = types.SimpleNamespace(gradients=grads)
    ctx = CheckContext(case, None, caps, oracle, run, profiles.get("ci"), backward=True)  # type: ignore[arg-type]
    return numeric.backward(ctx)


def test_the_backward_check_judges_dsinks_where_declared_and_says_when_it_cannot():
    case = Case("a", "float32", q_heads=2, kv_heads=1, q_len=16, kv_len=16, causal=True, sinks="normal")
    with_grad = dataclasses.replace(FULL, sinks=True, sinks_grad=True)
    assert _backward(case, with_grad, 1.0).verdict == "pass"
    wrong = _backward(case, with_grad, -1.0)
    assert wrong.verdict == "fail" and "dsinks: OUT OF TOLERANCE" in wrong.reason
    unobserved = _backward(case, dataclasses.replace(FULL, sinks=True), -1.0)
    assert unobserved.verdict == "pass" and "dsinks not observed" in unobserved.reason
    assert [m.tensor for m in unobserved.metrics] == ["dq", "dk", "dv"]


def test_a_sink_case_gets_a_standalone_repro_that_draws_sinks_as_the_suite_does():
    from conformance.judge import repro
    from conformance.suite.check_registry import declaration
    from kernels.adapters.function_adapter import FunctionAdapter
    from tests.mutants import correct

    impl = "tests.mutants.correct:attention"
    adapter = FunctionAdapter.wrap(correct.attention, impl)
    text = repro.script(EXTREME, declaration("forward"), impl, adapter=adapter)
    assert text.startswith('"""Standalone repro'), text[:300]
    assert "sinks = draw_sinks(SEED, 8, 0, HQ, SK, True)" in text and "def draw_sinks(" in text
    assert "sink_key(s, visible, v, sinks)" in text and "inputs_digest(q, k, v, bias, sinks)" in text
    assert "sinks=sinks" in text  # the user function gets them, as canonical_keywords passes them

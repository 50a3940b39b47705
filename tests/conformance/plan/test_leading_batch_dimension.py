"""Leading batch dims as a case dimension (``LEADING_BATCH_DIMS``): ids, validation, ``--case``, the
declaration, the reshapes a call goes through, curated cases for a declaring subject only, shrinking,
a request alone, and a plain function's call form and repro script."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import find, settings

from conformance.judge.inputs import build_inputs
from conformance.plan import catalogue, edge_matrix, profiles, strategies
from conformance.plan.cases import Case
from conformance.plan.user_cases import CaseSyntaxError, parse_case
from kernels.adapters.function_adapter import FunctionAdapter, call_arguments
from kernels.contract.base import Capabilities
from kernels.runtime.leading_batch import with_leading, without_leading
from reference.attention import attention_forward
from reference.spec import AttentionSpec
from tests.support.fakes import FULL, subject

LEAD = Case("a", "float32", batch=6, batch_dims=(2, 3), kv_lengths=(1, 2, 3, 4, 5, 6), q_len=8, kv_len=8)
DECLARED = dataclasses.replace(FULL, leading_batch_dims=True)


def test_the_reference_ignores_them_the_inputs_stay_batch_first():
    plain = dataclasses.replace(LEAD, batch_dims=None)
    inputs = build_inputs(LEAD)
    assert inputs.q.shape == (6, 1, 8, 64) and inputs.kv_lengths.shape == (6,)
    np.testing.assert_array_equal(
        attention_forward(inputs, LEAD.spec).out, attention_forward(inputs, plain.spec).out
    )


def test_bad_leading_dims_are_one_line_naming_the_fix():
    with pytest.raises(ValueError, match=r"batch_dims 2x3 holds 6 requests but batch is 4: set B=6"):
        Case("a", "float32", batch=4, batch_dims=(2, 3))
    with pytest.raises(ValueError, match=r"2 or more positive sizes"):
        Case("a", "float32", batch=6, batch_dims=(6,))
    with pytest.raises(ValueError, match=r"2 or more positive sizes"):
        AttentionSpec(batch_dims=(2, 0))


def test_user_cases_take_them():
    case = parse_case("B=6,batch_dims=2x3,kv_lengths=1/2/3/4/5/6", ("float32",))
    assert case.batch_dims == (2, 3) and case.kv_lengths == (1, 2, 3, 4, 5, 6)
    assert parse_case("batch_dims=no", ("float32",)).batch_dims is None
    with pytest.raises(CaseSyntaxError, match=r"batch_dims='6': write 2 or more positive sizes"):
        parse_case("B=6,batch_dims=6", ("float32",))
    with pytest.raises(CaseSyntaxError, match=r"set B=6"):
        parse_case("batch_dims=2x3", ("float32",))


def test_with_leading_reshapes_batch_first_arrays_and_keeps_a_broadcast_axis_broadcast():
    q = np.arange(6 * 2 * 3).reshape(6, 2, 3)
    lead = with_leading(q, (2, 3))
    assert lead.shape == (2, 3, 2, 3)
    np.testing.assert_array_equal(lead[1, 2], q[5])  # row-major: request b is (b // 3, b % 3)
    np.testing.assert_array_equal(without_leading(lead, (2, 3)), q)
    assert with_leading(np.arange(6), (2, 3)).shape == (2, 3)  # lengths
    assert with_leading(np.zeros((1, 4, 5, 5)), (2, 3)).shape == (1, 1, 4, 5, 5)  # a broadcast bias
    assert with_leading(None, (2, 3)) is None and with_leading(q, None) is q
    assert without_leading(q, None) is q


def test_a_declaring_subject_gets_the_curated_cases_in_its_first_dtype_only():
    ci = profiles.get("ci")
    declared = catalogue.cases_for(subject("s", DECLARED), ci, 0)
    lead = [c for c in declared if c.batch_dims is not None]
    assert len(lead) == len(edge_matrix.leading_batch_cases(0)) == 2
    assert {c.dtype for c in lead} == {"float32"}
    assert any(c.kv_lengths is not None and c.q_lengths is not None for c in lead)
    assert any(c.kv_lengths is None for c in lead)
    assert not [c for c in catalogue.cases_for(subject("s", FULL), ci, 0) if c.batch_dims is not None]


def test_the_lengths_case_has_no_two_rows_alike_so_another_order_moves_them():
    (lengths,) = [c for c in edge_matrix.leading_batch_cases(0) if c.kv_lengths is not None]
    for name in ("q_lengths", "kv_lengths"):
        rows = np.array(getattr(lengths, name))
        assert len(set(rows.tolist())) == len(rows)
        assert (rows.reshape(lengths.batch_dims).T.reshape(-1) != rows).any()


def test_shrinking_drops_them_with_a_smaller_batch_and_a_request_alone_keeps_the_form():
    smaller = find(strategies.within(LEAD, DECLARED), lambda c: c.batch < 6, settings=settings(database=None))
    assert smaller.batch_dims is None
    same = find(
        strategies.within(LEAD, DECLARED),
        lambda c: c.batch == 6 and c.batch_dims is not None,
        settings=settings(database=None),
    )
    assert same.batch_dims == (2, 3)
    assert LEAD.request(4).batch_dims == (1, 1) and LEAD.request(4).kv_lengths == (5,)


def _echo_shapes(q, k, v, *, scale, q_lengths=None, kv_lengths=None, bias=None):
    """Returns q as out: the shapes it was given, for the call-form test."""
    _echo_shapes.seen = (q.shape, None if kv_lengths is None else kv_lengths.shape, bias.shape)
    return q


_echo_shapes.attention_capabilities = Capabilities(
    dtypes=("float32",), lengths=True, bias=True, bias_broadcast=True, leading_batch_dims=True
)


def test_a_plain_function_gets_the_leading_dims_and_its_answer_is_flattened_back():
    case = dataclasses.replace(LEAD, bias="1h1k", head_dim=4, v_head_dim=4)
    inputs = build_inputs(case)
    arrays, keywords = call_arguments(inputs, case.spec)
    assert arrays[0].shape == (2, 3, 1, 8, 4) and keywords["kv_lengths"].tolist() == [[1, 2, 3], [4, 5, 6]]
    adapter = FunctionAdapter.wrap(_echo_shapes, "echo")
    out = adapter.forward(inputs, case.spec).out
    assert _echo_shapes.seen == ((2, 3, 1, 8, 4), (2, 3), (1, 1, 1, 1, 8))
    np.testing.assert_array_equal(out, inputs.q)
    script = adapter.standalone(case.skeleton(), case.spec)
    assert (
        "with_leading(q, (2, 3))" in script.forward and "with_leading(kv_lengths, (2, 3))" in script.forward
    )
    assert any("def without_leading" in d for d in script.definitions)
    plain = adapter.standalone(case.skeleton(), dataclasses.replace(case, batch_dims=None).spec)
    assert "with_leading" not in plain.forward and not plain.definitions

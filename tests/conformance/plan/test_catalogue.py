"""Meta-tests of the catalogue: what each (check, case) is to a subject."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.plan import catalogue, curated_sets, profiles
from conformance.plan.cases import Case
from tests.support.fakes import BLOCKED, FULL, subject


def test_declared_capabilities_decide_unsupported_with_the_reason():
    planned = catalogue.classify("forward", Case("s", "float32", window=(1, 1)), BLOCKED)
    assert planned.status == "unsupported" and "window" in planned.reason
    planned = catalogue.classify("forward", Case("s", "float16"), BLOCKED)
    assert planned.status == "unsupported" and "float16" in planned.reason


def test_a_raising_constraint_goes_to_the_raises_check_only():
    case = Case("s", "float32", q_len=128, kv_len=100)
    raises = catalogue.classify("raises", case, BLOCKED)
    assert raises.status == "raises" and raises.direction == "forward"
    assert "kv_multiple_of_128" in raises.reason
    forward = catalogue.classify("forward", case, BLOCKED)
    assert forward.status == "unsupported" and "declared to raise" in forward.reason


def test_a_subject_with_nothing_to_lower_gets_no_lowering_item_even_for_a_case_it_refuses():
    """cuDNN raises on odd lengths but lowers for no target: lowers must not expect a refusal
    to lower from it (seen on an H200: every such case failed lowers)."""
    case = Case("s", "float32", q_len=128, kv_len=100)
    assert BLOCKED.lowers_for is None
    for check in ("lowers", "vmem", "observable"):
        planned = catalogue.classify(check, case, BLOCKED)
        assert planned is not None and planned.status == "unsupported"
        assert "Capabilities.lowers_for" in planned.reason or "Mosaic" in planned.reason
    lowering = dataclasses.replace(BLOCKED, lowers_for="tpu")
    assert catalogue.classify("lowers", case, lowering).status == "raises"


def test_an_interpreter_limit_is_a_raises_item_but_the_lowered_call_is_lowered_and_native_drops_it():
    """Stage "interpreter": the interpreter raises, the hardware's compiler takes the case (tokamax's
    Triton backward in the generic interpreter). raises asserts it; lowers expects it to lower."""
    from kernels.contract.base import ShapeConstraint, compiled_where_run

    limit = ShapeConstraint(
        "interpreter_odd_q",
        "the interpreter's limit",
        lambda s, _: s.q_len % 2 == 0,
        "raises",
        stage="interpreter",
    )
    caps = dataclasses.replace(FULL, lowers_for="cuda", constraints=(limit,))
    case = Case("s", "float32", q_len=127, kv_len=128)
    assert catalogue.classify("raises", case, caps).status == "raises"
    assert catalogue.classify("forward", case, caps).status == "unsupported"
    assert catalogue.classify("lowers", case, caps).status == "run"
    assert compiled_where_run(caps.constraints, native=False) == (limit,)
    assert compiled_where_run(caps.constraints, native=True) == ()
    with pytest.raises(ValueError, match="'interpreter' needs basis 'raises'"):
        ShapeConstraint("x", "no parameter", lambda s, _: True, "api", stage="interpreter")


def test_a_case_refused_forward_lowers_no_backward_the_api_cannot_express():
    """tokamax's quantized inputs: the forward raises (declared), the backward has no gradient to take
    (basis api). lowers expects the forward to fail to lower and lowers no backward at all."""
    from kernels.contract.base import ShapeConstraint

    refused = ShapeConstraint("odd_q_raises", "raises", lambda s, _: s.q_len % 2 == 0, "raises", "forward")
    even_q = lambda s, _: s.q_len % 2 == 0  # noqa: E731
    no_grad = ShapeConstraint("odd_q_no_grad", "no gradient", even_q, "api", "backward")
    case = Case("s", "float32", q_len=127, kv_len=128)
    caps = dataclasses.replace(FULL, lowers_for="tpu", constraints=(refused, no_grad))
    planned = catalogue.classify("lowers", case, caps)
    assert planned.status == "raises" and planned.direction == "forward" and planned.backward is False
    caps = dataclasses.replace(FULL, lowers_for="tpu", constraints=(refused,))
    assert catalogue.classify("lowers", case, caps).backward is True


def test_a_non_raising_constraint_is_unsupported_and_not_a_raises_item():
    case = Case("s", "float32", q_len=64, kv_len=128)
    assert catalogue.classify("raises", case, BLOCKED) is None
    planned = catalogue.classify("forward", case, BLOCKED)
    assert planned.status == "unsupported" and "q_at_least_128" in planned.reason


def test_backward_only_constraints_raise_in_the_backward_direction():
    case = Case("s", "float32", q_len=200, kv_len=128)
    raises = catalogue.classify("raises", case, BLOCKED)
    assert raises.status == "raises" and raises.direction == "backward"
    assert catalogue.classify("forward", case, BLOCKED).status == "run"
    assert catalogue.classify("backward", case, BLOCKED).status == "unsupported"


def test_lse_unsupported_when_not_exposed_and_nan_padding_is_forward_only():
    case = Case("s", "float32", segments=2, orphan_segment=True, input_kind="nan_padding")
    assert catalogue.classify("lse", case, BLOCKED).status == "unsupported"
    assert catalogue.classify("backward", case, FULL) is None
    assert catalogue.classify("forward", case, FULL).status == "run"


def test_fully_masked_check_only_where_rows_are_fully_masked():
    plain = Case("s", "float32")
    masked = Case("s", "float32", causal=True, alignment="bottom_right", q_len=64, kv_len=32)
    assert catalogue.classify("fully_masked", plain, FULL) is None
    assert catalogue.classify("fully_masked", masked, FULL).status == "run"
    assert catalogue.has_fully_masked_rows(Case("s", "float32", q_lengths=(5,)))
    assert not catalogue.has_fully_masked_rows(Case("s", "float32", causal=True, q_len=64, kv_len=32))


def test_plan_covers_every_dtype_and_the_unavailable_subject_once_per_check():
    plan = catalogue.plan(
        (subject("full", FULL), subject("gone", FULL, available=False)), profiles.get("ci"), draw_seed=0
    )
    forward = [p for p in plan["forward"] if p.case.subject == "full"]
    assert {p.case.dtype for p in forward} == set(FULL.dtypes)
    gone = [p for check in catalogue.CHECKS for p in plan[check] if p.case.subject == "gone"]
    assert {p.status for p in gone} == {"unavailable"} and len(gone) == len(catalogue.CHECKS) - 1
    ids = [p.test_id for p in plan["forward"]]
    assert len(ids) == len(set(ids))
    leak = [p for p in plan["leak"] if p.case.subject == "full"]
    assert len(leak) == 1 and leak[0].status == "run"
    per_dtype = profiles.get("ci").runtime_cases_per_dtype
    determinism = [p for p in plan["determinism"] if p.case.subject == "full"]
    assert len(determinism) == per_dtype * len(FULL.dtypes)
    assert all(p.case.q_len >= 128 for p in determinism)  # several blocks, not the 1x1 case


def test_plan_is_a_pure_function_of_subjects_profile_and_seed():
    subjects = (subject("full", FULL),)
    a = catalogue.plan(subjects, profiles.get("dev"), draw_seed=7)
    b = catalogue.plan(subjects, profiles.get("dev"), draw_seed=7)
    c = catalogue.plan(subjects, profiles.get("dev"), draw_seed=8)
    assert [p.key for p in a["forward"]] == [p.key for p in b["forward"]]
    assert [p.key for p in a["forward"]] != [p.key for p in c["forward"]]


def test_every_case_runs_in_every_declared_dtype():
    cases = catalogue.cases_for(subject("blocked", BLOCKED), profiles.get("ci"), draw_seed=0)
    by_template = {}
    for case in cases:
        by_template.setdefault(dataclasses.replace(case, dtype=""), set()).add(case.dtype)
    curated = [dtypes for dtypes in by_template.values()]
    assert sum(1 for d in curated if d == {"float32", "bfloat16"}) >= 40


def test_ragged_patterns_follow_the_subjects_own_page_and_block():
    """The lengths come from the declaration: a page of 8 tokens and a 2-page block give rows of
    9 (a page and one) and 15, 16, 17 (around the block); kv lengths only where q lengths are not
    declared; none at all for a subject without lengths."""
    from kernels.contract.tunables import Tunable, Tunables

    caps = dataclasses.replace(
        FULL, q_lengths=False, tunables=Tunables((Tunable("pages_per_block", 2, "kv", unit=8),))
    )
    cases = curated_sets.ragged_cases(caps, 1)
    rows = {n for c in cases for n in c.kv_lengths}
    assert rows == {0, 1, 9, 15, 16, 17, 32} and all(c.q_lengths is None for c in cases)
    assert {c.batch for c in cases} == {3, 6} and all(c.kv_len == 32 for c in cases)
    assert curated_sets.ragged_cases(dataclasses.replace(FULL, lengths=False), 1) == ()
    with_q = curated_sets.ragged_cases(dataclasses.replace(caps, q_lengths=True), 0)
    assert all(c.q_lengths == c.kv_lengths for c in with_q)


@pytest.mark.parametrize("name", ["xla", "paged_attention", "ragged_paged_attention"])
def test_every_length_taking_subject_plans_the_ragged_patterns_at_ci(name):
    from conformance.judge.dtypes import DTYPE_NAMES
    from conformance.plan import edge_matrix
    from conformance.plan.subjects import resolve_subjects

    (subject,) = resolve_subjects(name)
    if subject.capabilities is None:
        pytest.skip(f"{name} neither runs nor lowers here: {subject.reason}")
    caps = subject.capabilities
    ragged = curated_sets.ragged_cases(caps, 0)
    assert len(ragged) == len(edge_matrix.ragged_patterns(0)) == 4
    dtype = next(d for d in DTYPE_NAMES if d in caps.dtypes)
    planned = set(catalogue.cases_for(subject, profiles.get("ci"), 0))
    assert {edge_matrix.instantiate(t, name, dtype) for t in ragged} <= planned


def test_config_applied_plans_the_configured_cases_and_says_why_for_a_subject_without_tunables():
    from kernels.contract.tunables import Tunable, Tunables

    tuned = dataclasses.replace(
        FULL, lowers_for="tpu", tunables=Tunables((Tunable("block_q", 128, "q", multiple_of=8),))
    )
    plan = catalogue.plan(
        (subject("tuned", tuned), subject("plain", dataclasses.replace(FULL, lowers_for="tpu"))),
        profiles.get("ci"),
        draw_seed=0,
    )
    items = {s: [p for p in plan["config_applied"] if p.case.subject == s] for s in ("tuned", "plain")}
    assert items["tuned"] and all(p.case.config and p.status == "run" for p in items["tuned"])
    (plain,) = items["plain"]  # one record with the reason, not silence
    assert plain.status == "unsupported" and "Capabilities.tunables" in plain.reason


def test_kv_cache_runs_on_every_case_of_a_cache_writer_and_says_why_once_for_any_other_subject():
    plan = catalogue.plan(
        (subject("writer", dataclasses.replace(FULL, kv_cache=True)), subject("plain", FULL)),
        profiles.get("ci"),
        draw_seed=0,
    )
    items = {s: [p for p in plan["kv_cache"] if p.case.subject == s] for s in ("writer", "plain")}
    forward = [p for p in plan["forward"] if p.case.subject == "writer"]
    assert [(p.case, p.status) for p in items["writer"]] == [(p.case, p.status) for p in forward]
    assert sum(p.status == "run" for p in items["writer"]) > 1
    (plain,) = items["plain"]  # one record with the reason, not one per case
    assert plain.status == "unsupported" and "Capabilities.kv_cache" in plain.reason


def test_a_decode_kernels_edge_configs_run_when_only_the_hardware_refuses_other_head_dims():
    """paged_attention decodes one query (Sq = 1), causal top-left unsupported, and declares head dims
    off multiples of 128 as refused by Mosaic only (stage lowering). Its edge configs (megacore
    modes, pages per compute block) must ride on the decode shape and run; they had all ridden on
    the prefill shape it cannot express, so no config of it ran at ci."""
    from conformance.plan.subjects import resolve_subjects

    (paged,) = resolve_subjects("paged_attention")
    configured = [c for c in catalogue.cases_for(paged, profiles.get("ci"), 0) if c.config]
    megacore = {dict(c.config).get("megacore_mode") for c in configured}
    assert {"batch", "kv_head"} <= megacore
    runs = [c for c in configured if catalogue.classify("forward", c, paged.capabilities).status == "run"]
    assert {dict(c.config).get("megacore_mode") for c in runs} >= {"batch", "kv_head"}
    assert all(c.q_len == 1 and c.head_dim == 128 for c in runs if dict(c.config).get("megacore_mode"))

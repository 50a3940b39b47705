"""The vmap check: a subject's JAX call under ``jax.vmap`` over two stacked requests, each slice
judged against the reference with the unbatched call as its baseline."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.judge.checks.jax_calls import CANNOT_STATE
from conformance.judge.checks.vmap import HEADS_LABEL, NO_HEAD_AXES, NO_JAX_CALL
from conformance.judge.runner import run_check
from conformance.plan import catalogue, profiles
from conformance.plan.cases import Case
from tests.mutants.vmap import VmapAdapter
from tests.support import toy_subjects
from tests.support.fakes import FULL, subject

CASE = Case("toy", "float32", batch=2, q_heads=2, kv_heads=2, q_len=64, kv_len=64, causal=True)


def test_a_subject_without_a_jax_call_is_unsupported_with_the_reason():
    outcome = run_check(CASE, "vmap", impl=f"{toy_subjects.__name__}:exact")
    assert outcome.verdict == "unsupported" and outcome.reason == NO_JAX_CALL


def test_batching_as_it_computes_passes_and_answering_every_slice_with_the_first_fails():
    passing = run_check(CASE, "vmap", impl="tests.mutants.vmap:VmapAdapter")
    assert passing.verdict == "pass", passing.reason
    failing = run_check(CASE, "vmap", impl="tests.mutants.vmap:FirstSliceUnderVmap")
    assert failing.verdict == "fail"
    # the first slice is right; the batch-reversed one gets the first one's answer
    assert "out (slice 1, batch reversed): OUT OF TOLERANCE" in failing.reason
    assert "out (slice 0): ok" in failing.reason
    # along heads, the second group of heads gets the first group's answer
    assert f"out ({HEADS_LABEL}): OUT OF TOLERANCE" in failing.reason
    assert "not put under" not in passing.reason
    judged = {m.tensor for m in passing.metrics}
    assert {f"{n} ({HEADS_LABEL})" for n in ("out", "lse", "dq", "dk", "dv")} <= judged, judged


@pytest.mark.parametrize("kv_heads", [1, 2], ids=["mqa-kv-shared", "gqa-kv-split"])
def test_vmap_along_heads_splits_query_heads_and_shares_a_single_kv_head(kv_heads):
    case = dataclasses.replace(CASE, q_heads=4, kv_heads=kv_heads)
    outcome = run_check(case, "vmap", impl="tests.mutants.vmap:VmapAdapter")
    assert outcome.verdict == "pass", outcome.reason
    assert {f"dk ({HEADS_LABEL})", f"dv ({HEADS_LABEL})"} <= {m.tensor for m in outcome.metrics}


def test_vmap_along_heads_says_why_it_did_not_run():
    odd = run_check(
        dataclasses.replace(CASE, q_heads=1, kv_heads=1), "vmap", impl="tests.mutants.vmap:VmapAdapter"
    )
    assert odd.verdict == "pass" and "1 query and 1 kv head(s) do not split into 2 groups" in odd.reason
    undeclared = run_check(CASE, "vmap", impl=f"{__name__}:HeadsUndeclared")
    assert undeclared.verdict == "pass" and NO_HEAD_AXES in undeclared.reason
    assert not any(HEADS_LABEL in m.tensor for m in undeclared.metrics)


@dataclasses.dataclass(frozen=True, eq=False)
class HeadsUndeclared(VmapAdapter):
    """The control's call without ``JaxCall.heads``: vmapped along its batch only."""

    name: str = "heads_undeclared"

    def jax_call(self, inputs, spec, dout=None):
        return dataclasses.replace(super().jax_call(inputs, spec, dout), heads=None)


@dataclasses.dataclass(frozen=True, eq=False)
class CannotState(VmapAdapter):
    """A subject whose JAX call declares this case beyond it (``NotImplementedError``)."""

    name: str = "cannot_state"

    def jax_call(self, inputs, spec, dout=None):
        raise NotImplementedError("the mask is built into one kernel per batch row\nsecond line")


def test_a_jax_call_that_cannot_state_the_case_is_unsupported_with_its_first_line():
    outcome = run_check(CASE, "vmap", impl=f"{__name__}:CannotState")
    assert outcome.verdict == "unsupported", outcome.reason
    assert outcome.reason == CANNOT_STATE.format(reason="the mask is built into one kernel per batch row")


def test_vmap_takes_one_case_per_form_of_batch():
    """A case whose requests differ by per-request inputs, then a plain batch: a subject that builds
    a per-row input into its function (splash's mask planes) cannot vmap the first, only the second."""
    plan = catalogue.plan((subject("full", FULL),), profiles.get("ci"), draw_seed=0)
    items = [p for p in plan["vmap"] if p.case.subject == "full"]
    assert [catalogue._distinct_requests(p.case) for p in items] == [True, False]
    assert all(p.case.batch >= 2 and p.status == "run" and p.case.dtype == "float32" for p in items)
    plain = [
        p for p in plan["forward"] if p.case.subject == "full" and not catalogue._distinct_requests(p.case)
    ]
    (one,) = catalogue.SAMPLES["vmap_cases"](plain, profiles.get("ci"))  # nothing per request: one form
    assert one.case.batch >= 2

"""Smoke tests of the check functions on toy subjects, in process (``run_check``): each check
passes a correct subject and rejects the fault it exists for. The full catalogue of
mutants lives with the mutation meta-tests."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.judge.runner import Runner, run_check
from conformance.plan.cases import Case
from conformance.plan.catalogue import classify, plan
from conformance.plan.profiles import get
from conformance.plan.subjects import Subject, resolve_subjects
from kernels.function_adapter import FunctionAdapter
from tests.conformance import toy_subjects

TOY = "tests.conformance.toy_subjects"
PADDED = Case("toy", "float32", batch=2, q_len=128, kv_len=128, q_lengths=(128, 60), kv_lengths=(100, 0))


@pytest.mark.parametrize(
    "check",
    ["forward", "lse", "fully_masked", "finite", "shape_dtype", "no_mutation", "determinism"],
)
def test_the_exact_subject_passes(check):
    assert run_check(PADDED, check, impl=f"{TOY}:exact").verdict == "pass"


def test_mean_v_convention_is_held_to_mean_v():
    assert run_check(PADDED, "fully_masked", impl=f"{TOY}:finite_mask").verdict == "pass"
    outcome = run_check(PADDED, "fully_masked", impl=f"{TOY}:finite_mask_claims_zeros")
    assert outcome.verdict == "fail" and "convention 'zeros'" in outcome.reason
    assert run_check(PADDED, "forward", impl=f"{TOY}:finite_mask").verdict == "pass"


def test_wrong_scale_fails_forward_and_lse():
    for check in ("forward", "lse"):
        assert run_check(PADDED, check, impl=f"{TOY}:scaled_wrong").verdict == "fail"


def test_a_flipped_last_bit_fails_determinism():
    results = {run_check(PADDED, "determinism", impl=f"{TOY}:noisy").verdict for _ in range(6)}
    assert "fail" in results


def test_keeping_one_output_per_call_is_a_leak():
    leaky = FunctionAdapter.wrap(toy_subjects.make_leaky(), "leaky")
    subject = Subject("leaky", "leaky", leaky, leaky.availability(), leaky.capabilities())
    case = Case("leaky", "float32", batch=2, q_heads=2, kv_heads=2, q_len=128, kv_len=128)  # 128 KiB outputs
    planned = classify("leak", case, subject.capabilities)
    verdict, outcome = Runner((subject,), get("ci"), shrink=False).outcome(planned)
    assert verdict == "fail" and "host allocations" in outcome.reason
    assert "live JAX arrays" in outcome.reason
    exact = FunctionAdapter.wrap(toy_subjects.exact, "exact")
    exact_jax = dataclasses.replace(exact.capabilities(), jax_runtime=True)
    subject = Subject("exact", "exact", exact, exact.availability(), exact_jax)
    case = Case("exact", "float32", batch=2, q_heads=2, kv_heads=2, q_len=128, kv_len=128)
    planned = classify("leak", case, subject.capabilities)
    assert Runner((subject,), get("ci"), shrink=False).outcome(planned)[0] == "pass"


@pytest.mark.parametrize("check", ["recompile", "leak"])
def test_runtime_checks_are_unsupported_without_a_jax_runtime(check):
    """A NumPy function creates no JAX compilations or arrays: the check cannot observe it,
    so it is unsupported with the reason, never a vacuous pass."""
    exact = FunctionAdapter.wrap(toy_subjects.exact, "exact")
    subject = Subject("exact", "exact", exact, exact.availability(), exact.capabilities())
    case = Case("exact", "float32", batch=2, q_heads=2, kv_heads=2, q_len=128, kv_len=128)
    planned = classify(check, case, subject.capabilities)
    assert planned.status == "unsupported" and "no JAX runtime" in planned.reason
    items = plan((subject,), get("ci"), 0)[check]
    assert items and {p.status for p in items} == {"unsupported"}
    assert Runner((subject,), get("ci"), shrink=False).evaluate(items[0]).verdict == "unsupported"


@pytest.mark.parametrize("check", ["recompile", "leak"])
def test_runtime_checks_are_unsupported_for_torch_sdpa(check):
    (subject,) = resolve_subjects("torch_sdpa")
    if not subject.available:
        pytest.skip(subject.reason)
    items = plan((subject,), get("ci"), 0)[check]
    assert items and {p.status for p in items} == {"unsupported"}
    assert all("no JAX runtime" in p.reason for p in items)

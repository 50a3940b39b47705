"""Smoke tests of the check functions on toy subjects, in process (``run_check``): each check
passes a correct subject and rejects the fault it exists for. The full catalogue of
mutants lives with the mutation meta-tests."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.judge.checks.runtime import rss_leaks
from conformance.judge.runner import Runner, run_check
from conformance.plan.cases import Case
from conformance.plan.catalogue import classify, plan
from conformance.plan.profiles import get
from conformance.plan.subjects import Subject, resolve_subjects
from kernels.adapters.function_adapter import FunctionAdapter
from run_records.results_file import UNDECLARED_JAX_RUNTIME
from tests.support import toy_subjects

TOY = "tests.support.toy_subjects"
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


def _native_memory_subject(name: str, mib_on_call) -> Subject:
    """The exact subject, touching ``mib_on_call(n)`` MiB of anonymous mmap pages on its n-th
    call and keeping them: memory tracemalloc never sees, only the RSS."""
    import mmap

    kept, calls = [], iter(range(10**6))

    def attention(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
        size = mib_on_call(next(calls)) << 20
        if size:
            pages = mmap.mmap(-1, size)
            pages.write(b"\x01" * size)
            kept.append(pages)
        lengths = {"q_lengths": q_lengths, "kv_lengths": kv_lengths}
        return toy_subjects.exact(q, k, v, scale=scale, causal=causal, alignment=alignment, **lengths)

    attention.attention_capabilities = toy_subjects.exact.attention_capabilities
    adapter = FunctionAdapter.wrap(attention, name)
    return Subject(name, name, adapter, adapter.availability(), adapter.capabilities())


@pytest.mark.parametrize(
    "name, mib_on_call, verdict",
    [
        ("steady", lambda n: 1, "fail"),  # 1 MiB a call: in both halves of the measured calls
        ("one_jump", lambda n: 6 if n == 14 else 0, "pass"),  # 6 MiB once, in one half: the allocator's way
        # one jump in each half, as a loaded CI run once gave a correct kernel (2.1 and 6.8 MiB):
        # the confirming window grows nothing
        ("two_jumps", lambda n: {15: 3, 21: 7}.get(n, 0), "pass"),
    ],
)
def test_an_rss_leak_grows_in_every_window_of_calls_and_jumps_are_not_a_leak(name, mib_on_call, verdict):
    subject = _native_memory_subject(name, mib_on_call)
    case = Case(name, "float32", batch=1, q_heads=1, kv_heads=1, q_len=128, kv_len=128)
    planned = classify("leak", case, subject.capabilities)
    got, outcome = Runner((subject,), get("ci"), shrink=False).outcome(planned)
    assert got == verdict, outcome.reason
    if verdict == "fail":
        assert "host RSS grew" in outcome.reason and "in each window" in outcome.reason
        assert "host allocations" not in outcome.reason  # tracemalloc never saw it
        assert len(outcome.details["rss_growth_per_window_bytes"]) == 3  # confirmed before failing
    else:  # the jumps landed among the measured calls: the whole-run rule alone would have failed it
        assert outcome.details["rss_growth_bytes"] >= 4 << 20, outcome.details
    if name == "two_jumps":  # each half alone passed the old two-halves rule; the confirmation saved it
        first, second, confirming = outcome.details["rss_growth_per_window_bytes"]
        assert min(first, second) >= 2 << 20 and confirming < 2 << 20, outcome.details


@pytest.mark.parametrize(
    "windows, verdict",
    [
        ((3 << 20, 3 << 20, 6 << 20), True),  # steady: every window grows
        ((3 << 20, 3 << 20), True),  # not yet confirmed: the check then runs a confirming window
        ((2 << 20, 7 << 20, 0), False),  # a jump in each half, nothing after
        ((0, 9 << 20), False),  # one jump
        ((1 << 20, 1 << 20, 2 << 20), False),  # steady but under the floor
    ],
)
def test_rss_leaks_needs_every_window_to_grow(windows, verdict):
    assert rss_leaks(windows, 4 << 20) is verdict


UNDECLARED = "tests.mutants.undeclared"
SMALL = Case("toy", "float32", batch=2, q_heads=2, kv_heads=2, q_len=128, kv_len=128)  # 128 KiB outputs


def _evaluate(impl: str, check: str):
    """The record ``check`` gets on ``SMALL`` for the function at ``impl`` (planned as the suite plans it)."""
    (subject,) = resolve_subjects(impl)
    case = dataclasses.replace(SMALL, subject=subject.name)
    planned = classify(check, case, subject.capabilities)
    assert planned.status == "run", planned.reason  # planned whatever the declaration says
    return Runner((subject,), get("ci"), shrink=False).evaluate(planned)


def test_a_numpy_subject_gets_the_host_side_of_leak_and_no_recompile():
    """Without Capabilities.jax_runtime a NumPy function still has host memory to leak: judged.
    Nothing compiles under JAX, so recompile has nothing to observe: unsupported, with why."""
    leak = _evaluate(f"{UNDECLARED}:numpy_attention", "leak")
    assert leak.verdict == "pass" and "live JAX arrays not counted" in leak.reason
    assert not leak.details.get(UNDECLARED_JAX_RUNTIME)
    recompile = _evaluate(f"{UNDECLARED}:numpy_attention", "recompile")
    assert recompile.verdict == "unsupported" and "no JAX compilation observed" in recompile.reason
    caught = _evaluate(f"{UNDECLARED}:leaks_host", "leak")
    assert caught.verdict == "fail" and "host allocations" in caught.reason, caught.reason


def test_a_jax_subject_that_declares_no_runtime_is_observed_and_caught():
    """JAX compiled during the first call: the checks run their JAX side and say the
    declaration contradicts what was observed."""
    for check in ("recompile", "leak"):
        correct = _evaluate(f"{UNDECLARED}:jax_attention", check)
        assert correct.verdict == "pass", correct.reason
        assert correct.details.get(UNDECLARED_JAX_RUNTIME) == 1 and "contradicts" in correct.reason
    caught = _evaluate(f"{UNDECLARED}:recompiles_undeclared", "recompile")
    assert caught.verdict == "fail" and "compiled" in caught.reason and "contradicts" in caught.reason
    assert caught.details.get(UNDECLARED_JAX_RUNTIME) == 1


@pytest.mark.parametrize("check", ["recompile", "leak"])
def test_runtime_checks_observe_torch_sdpa(check):
    (subject,) = resolve_subjects("torch_sdpa")
    if not subject.available:
        pytest.skip(subject.reason)
    items = plan((subject,), get("ci"), 0)[check]
    assert items and {p.status for p in items} == {"run"}
    record = Runner((subject,), get("ci"), shrink=False).evaluate(items[0])
    if check == "recompile":  # PyTorch compiles nothing under JAX
        assert record.verdict == "unsupported" and "no JAX compilation observed" in record.reason
    else:  # its host memory is judged
        assert record.verdict == "pass" and "live JAX arrays not counted" in record.reason

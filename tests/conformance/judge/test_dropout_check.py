"""The dropout check on small cases: right dropout passes, whether the mask is passed or drawn from
a key; an answer without dropout, a backward without the mask, a drawn rate that is not the one
requested, a mask that follows the values and a key that changes nothing fail; a declared
rejection must raise."""

from __future__ import annotations

import dataclasses

import jax
import pytest

from conformance.judge.checks.dropout import NO_MEMBER, RATE
from conformance.judge.runner import run_check
from conformance.plan.cases import Case
from kernels.contract.base import Capabilities, ShapeConstraint
from kernels.contract.dropout import DROPOUT_FEATURE
from tests.mutants.correct import CorrectAdapter
from tests.mutants.dropout import KeyDropout, MaskDropout

CASE = Case(
    "toy",
    "float32",
    batch=1,
    q_heads=2,
    kv_heads=2,
    q_len=64,
    kv_len=64,
    head_dim=32,
    v_head_dim=32,
    causal=True,
)
MUTANTS = "tests.mutants.dropout"


@pytest.mark.parametrize("control", ["MaskDropout", "KeyDropout"])
def test_dropout_applied_as_the_semantics_say_passes(control: str):
    outcome = run_check(CASE, "dropout", impl=f"{MUTANTS}:{control}")
    assert outcome.verdict == "pass", outcome.reason
    assert outcome.details["rate"] == RATE


def test_a_drawn_mask_is_read_and_counted():
    outcome = run_check(CASE, "dropout", impl=f"{MUTANTS}:KeyDropout")
    # causal 64 x 64, two heads: 2 * 64 * 65 / 2 visible weights, readable where p >= 1e-6 (nearly all)
    visible = 2 * 64 * 65 // 2
    assert 0.99 * visible <= outcome.details["readable"] <= visible
    assert outcome.details["binomial_p"] >= 1e-6


def test_an_answer_without_dropout_does_not_earn_a_pass():
    outcome = run_check(CASE, "dropout", impl=f"{MUTANTS}:MaskIgnored")
    assert outcome.verdict == "fail"
    assert "out: OUT OF TOLERANCE" in outcome.reason


def test_a_mask_in_the_forward_only_fails_on_the_gradients_alone():
    outcome = run_check(CASE, "dropout", impl=f"{MUTANTS}:ForwardOnlyDropout")
    assert outcome.verdict == "fail"
    assert "dq: OUT OF TOLERANCE" in outcome.reason and "out: ok" in outcome.reason


def test_a_drawn_rate_other_than_the_one_requested_fails_the_binomial_test():
    outcome = run_check(CASE, "dropout", impl=f"{MUTANTS}:RateOff")
    assert outcome.verdict == "fail"
    assert "exact two-sided binomial test" in outcome.reason and "OUT OF TOLERANCE" not in outcome.reason


@dataclasses.dataclass(frozen=True, eq=False)
class KeyIgnored(KeyDropout):
    """Draws the same mask whatever the key."""

    name: str = "dropout_key_ignored"

    def keep(self, request, shape):
        return jax.random.bernoulli(jax.random.key(0), 1.0 - request.rate, shape)


@dataclasses.dataclass(frozen=True, eq=False)
class ValueDependent(KeyDropout):
    """Draws its mask under the key folded with q's values: the probe's assumption broken."""

    name: str = "dropout_value_dependent"

    def keep(self, request, shape):
        return jax.random.bernoulli(jax.random.key(request.seed), 1.0 - request.rate, shape)

    def dropout(self, inputs, spec, request, dout=None):
        folded = dataclasses.replace(request, seed=request.seed + int(abs(inputs.q).sum() > 0))
        return super().dropout(inputs, spec, folded, dout)


def test_a_key_that_changes_nothing_fails():
    outcome = run_check(CASE, "dropout", impl=f"{__name__}:KeyIgnored")
    assert outcome.verdict == "fail" and "drew the same mask" in outcome.reason


def test_a_mask_that_follows_the_values_fails_as_unreadable():
    outcome = run_check(CASE, "dropout", impl=f"{__name__}:ValueDependent")
    assert outcome.verdict == "fail" and "the mask depends on the values" in outcome.reason


def _rejecting(applies_to: str) -> Capabilities:
    rejection = ShapeConstraint(
        name="no_dropout",
        reason="dropout is not supported (NotImplementedError)",
        holds=lambda shape, spec: False,
        basis="raises",
        applies_to=applies_to,  # type: ignore[arg-type]
        features=(DROPOUT_FEATURE,),
        exceptions=("NotImplementedError",),
    )
    return dataclasses.replace(MaskDropout().capabilities(), constraints=(rejection,))


@dataclasses.dataclass(frozen=True, eq=False)
class RejectsForward(MaskDropout):
    name: str = "dropout_rejects_forward"

    def capabilities(self):
        return _rejecting("both")

    def dropout(self, inputs, spec, request, dout=None):
        raise NotImplementedError("dropout is not supported.")


@dataclasses.dataclass(frozen=True, eq=False)
class DeclaresButRuns(MaskDropout):
    name: str = "dropout_declares_but_runs"

    def capabilities(self):
        return _rejecting("both")


@dataclasses.dataclass(frozen=True, eq=False)
class RejectsBackward(MaskDropout):
    name: str = "dropout_rejects_backward"

    def capabilities(self):
        return _rejecting("backward")

    def dropout(self, inputs, spec, request, dout=None):
        if dout is not None:
            raise NotImplementedError("`dropout_mask` unsupported.")
        return super().dropout(inputs, spec, request)


def test_a_declared_forward_rejection_that_raises_is_unsupported_and_one_that_returns_fails():
    raised = run_check(CASE, "dropout", impl=f"{__name__}:RejectsForward")
    assert raised.verdict == "unsupported" and "raised NotImplementedError" in raised.reason
    returned = run_check(CASE, "dropout", impl=f"{__name__}:DeclaresButRuns")
    assert (
        returned.verdict == "fail"
        and "declared to raise" in returned.reason
        and "but returned" in returned.reason
    )


def test_a_declared_backward_rejection_leaves_the_forward_judged():
    outcome = run_check(CASE, "dropout", impl=f"{__name__}:RejectsBackward")
    assert outcome.verdict == "pass", outcome.reason
    assert "dropout backward raised NotImplementedError" in outcome.reason


@dataclasses.dataclass(frozen=True, eq=False)
class NoMember(CorrectAdapter):
    name: str = "dropout_declared_without_a_call"

    def capabilities(self):
        return dataclasses.replace(super().capabilities(), dropout="mask")


def test_a_declaration_without_a_dropout_call_is_unsupported_and_no_declaration_is_not_run():
    assert run_check(CASE, "dropout", impl=f"{__name__}:NoMember").reason == NO_MEMBER
    with pytest.raises(ValueError, match="no dropout declared"):
        run_check(CASE, "dropout", impl="tests.mutants.correct:CorrectAdapter")

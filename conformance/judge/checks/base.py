"""What a check function gets (``CheckContext``) and returns (``Outcome``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from conformance.judge.artifacts import Oracle, SubjectRun
from conformance.judge.baseline import BaselineGrads, BaselineOutput, numerics
from conformance.judge.tolerance import Judgement
from conformance.plan.cases import Case
from conformance.plan.profiles import Profile
from kernels.contract.base import Adapter, Capabilities
from run_records.results_file import TensorMetrics


@dataclasses.dataclass(frozen=True, eq=False)
class CheckContext:
    """One (check, case) to judge: the case, its subject, and the shared artifacts.

    direction: for the ``raises`` check, the call declared to raise.
    backward: whether the backward pass runs for this case (decided at planning): checks
    that look at every output (shape_dtype, finite, no_mutation, ...) include the gradients.
    """

    case: Case
    adapter: Adapter
    capabilities: Capabilities
    oracle: Oracle
    run: SubjectRun
    profile: Profile
    direction: str = "forward"
    backward: bool = False

    @property
    def dtype(self) -> str:
        return self.case.dtype

    @property
    def baseline(self) -> BaselineOutput:
        """The baseline as this subject's declared arithmetic makes it (fp8: P rounded or not,
        out's dtype; ``baseline.numerics``)."""
        return self.oracle.baseline_for(numerics(self.capabilities, self.dtype))

    @property
    def baseline_grads(self) -> BaselineGrads:
        return self.oracle.baseline_grads_for(numerics(self.capabilities, self.dtype))


@dataclasses.dataclass(frozen=True)
class Outcome:
    """verdict: "pass" or "fail" (errors are SubjectError, raised), or "unsupported" when the
    check found at run time that it cannot observe the subject (say why); reason: one paragraph
    naming what failed, the worst element and the fraction failing; details: numbers the
    check measured (e.g. the leak check's growth), recorded in the result's ``details``;
    observed: behaviour where the semantics are open (``conformance.judge.behaviour``), recorded as is."""

    verdict: Literal["pass", "fail", "unsupported"]
    reason: str = ""
    metrics: tuple[TensorMetrics, ...] = ()
    details: dict[str, object] = dataclasses.field(default_factory=dict)
    observed: dict[str, str] = dataclasses.field(default_factory=dict)


CheckFunction = Callable[[CheckContext], Outcome]


def from_judgements(judgements: list[Judgement], prefix: str = "") -> Outcome:
    """Fail iff some tensor failed; pass iff none failed and at least one passed strongly.

    A tensor that met a tolerance some trivially wrong answer meets too (``Judgement.weak``)
    earns no pass: it is named as not judged, and a check whose every passing tensor is weak
    is ``unsupported``, with the reason. The reason lists every tensor, failing ones first.
    """
    failing = [j for j in judgements if not j.passed]
    weak = [j for j in judgements if j.passed and j.weak]
    metrics = tuple(j.metrics for j in judgements)
    if failing:
        lines = [j.explain() for j in failing + [j for j in judgements if j.passed]]
        return Outcome("fail", (prefix + "\n" if prefix else "") + "\n".join(lines), metrics)
    not_judged = "\n".join(j.explain_weak() for j in weak)
    if len(weak) == len(judgements):
        return Outcome("unsupported", (prefix + "\n" if prefix else "") + not_judged, metrics)
    return Outcome("pass", not_judged, metrics)


def passed(reason: str = "", **details: object) -> Outcome:
    return Outcome("pass", reason, details=dict(details))


def failed(reason: str, **details: object) -> Outcome:
    return Outcome("fail", reason, details=dict(details))


def unsupported(reason: str) -> Outcome:
    """The check cannot observe this subject (found when it ran): never a vacuous pass."""
    return Outcome("unsupported", reason)

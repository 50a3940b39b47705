"""Runs one planned (check, case) and turns the outcome into a ``run_records.results_file.CaseResult``.

The runner is pytest-free: the plugin calls ``Runner.evaluate`` inside each test, and
repro scripts call ``run_check``. A subject that raises yields verdict ``error`` with
the exception; a failure is shrunk (``shrink.py``) to a smaller failing case when the
session's shrink budget allows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from conformance.judge import repro
from conformance.judge.artifacts import ArtifactStore, SubjectError
from conformance.judge.checks.base import CheckContext, Outcome
from conformance.judge.settled_cache import NOTHING_KEPT, SettledCache
from conformance.plan import subject_warnings
from conformance.plan.cases import Case
from conformance.plan.catalogue import Planned, classify
from conformance.plan.profiles import Profile, get
from conformance.plan.subjects import Subject, resolve_subjects
from conformance.suite.check_registry import declaration
from run_records.results_file import MINIMAL_CASE_KEY, WARNINGS, CaseDescription, CaseResult


def case_description(case: Case) -> CaseDescription:
    """The record's description of a case: everything needed to rebuild it, and its words."""
    return CaseDescription(
        case_id=case.case_id,
        subject=case.subject,
        dtype=case.dtype,
        seed=case.seed,
        fields=case.field_values(),
        words=case.words(),
    )


def availability_block(subject: Subject, ran: str = "", warned: tuple[str, ...] = ()) -> dict[str, object]:
    """The record's subject block: its availability, what ran, and every distinct warning it raised
    (``warnings``: while resolved, then in this case's calls; absent when none)."""
    block = dataclasses.asdict(subject.availability)
    block["versions"] = dict(subject.availability.versions)
    if ran:
        block["ran"] = ran
    warnings = subject_warnings.distinct((*subject.warnings, *warned))
    if warnings:
        block[WARNINGS] = list(warnings)
    return block


class Runner:
    """Evaluates planned checks for one session: owns the artifact store and shrink budget."""

    def __init__(
        self,
        subjects: tuple[Subject, ...],
        profile: Profile,
        shrink: bool = True,
        known: Callable[[CaseResult], bool] | None = None,
        settled: SettledCache = NOTHING_KEPT,
    ):
        """``known``: whether the ledger explains a failing record. Such a failure is not shrunk:
        its smallest case is the ledger entry's, and shrinking it again on every run spent the
        session's shrink budget (60 s per worker at ci) on what is already understood.
        ``settled``: where references, baselines and lowerings are kept across runs (none by default)."""
        self.subjects = {s.name: s for s in subjects}
        self.profile = profile
        self.settled = settled
        self.store = ArtifactStore(settled=settled)
        self.known = known or (lambda result: False)
        self.shrink_enabled = shrink
        self.shrink_seconds_left = profile.shrink_seconds
        self._shrunk: set[tuple[str, str]] = set()

    def context(self, planned: Planned) -> CheckContext:
        case = planned.case
        subject = self.subjects[case.subject]
        return CheckContext(
            case=case,
            adapter=subject.adapter_for(case.config),
            capabilities=subject.capabilities,
            oracle=self.store.oracle(case),
            run=self.store.run(case, subject.adapter_for(case.config)),
            profile=self.profile,
            direction=planned.direction,
            backward=planned.backward,
        )

    def outcome(self, planned: Planned) -> tuple[str, Outcome | SubjectError]:
        """(verdict, outcome-or-error) of running the check function; never raises SubjectError."""
        try:
            result = declaration(planned.check).resolve()(self.context(planned))
        except SubjectError as error:
            return "error", error
        return result.verdict, result

    def evaluate(self, planned: Planned) -> CaseResult:
        """The record for one planned item (runs the check unless unsupported/unavailable)."""
        case, check = planned.case, planned.check
        subject = self.subjects[case.subject]
        base = {
            "case": case_description(case),
            "check": check,
            "features": (check, case.dtype, *case.features),
        }
        if planned.status in ("unsupported", "unavailable"):
            return CaseResult(
                verdict=planned.status,
                reason=planned.reason,
                availability=availability_block(subject),
                **base,
            )
        start = time.perf_counter()
        verdict, result = self.outcome(planned)
        elapsed = time.perf_counter() - start
        run = self.store.run(case, subject.adapter_for(case.config))
        if verdict == "unsupported":  # found at run time: nothing observable (e.g. nothing compiled)
            return CaseResult(
                verdict=verdict,
                reason=result.reason,
                availability=availability_block(subject, warned=run.warnings()),
                **base,
            )
        timings = {**run.timings(), "check_s": elapsed}
        forward = run.__dict__.get("forward_call")
        ran = getattr(forward.value, "ran", "") if forward is not None and forward.value is not None else ""
        details: dict[str, float | str] = {}
        observed: dict[str, str] = {}
        if isinstance(result, SubjectError):
            reason, metrics = str(result), ()
        else:
            reason, metrics, observed = result.reason, result.metrics, dict(result.observed)
            details = {k: float(v) for k, v in result.details.items() if isinstance(v, int | float)}
        minimal = None
        availability = availability_block(subject, ran, run.warnings())
        judged = CaseResult(
            verdict=verdict, reason=reason, metrics=metrics, availability=availability, **base
        )
        if verdict != "pass" and not self.known(judged):
            minimal = self._shrink(check, case, verdict)
            if minimal is not None and minimal != case:
                reason += f"\nShrunk to a smaller failing case: {minimal.case_id} ({minimal.summary()})"
                # Read by reports.run_report.grouping: failures shrinking to one minimal case are one finding.
                details[MINIMAL_CASE_KEY] = minimal.case_id
        return CaseResult(
            verdict=verdict,
            reason=reason,
            metrics=metrics,
            timings=timings,
            details=details,
            observed=observed,
            availability=availability,
            repro="" if verdict == "pass" else self._repro(planned, subject, metrics, reason, minimal),
            **base,
        )

    def _repro(
        self, planned: Planned, subject: Subject, metrics: tuple, reason: str, minimal: Case | None
    ) -> str:
        """The failure's repro script: standalone for the recorded case where the adapter allows."""
        versions = ", ".join(f"{name} {version}" for name, version in subject.availability.versions)
        return repro.script(
            planned.case,
            declaration(planned.check),
            subject.impl,
            adapter=subject.adapter_for(planned.case.config),  # the case's blocks, as it ran
            recorded=metrics,
            reason=reason,
            versions=versions,
            minimal=minimal,
            gradients=planned.backward,
        )

    def _shrink(self, check: str, case: Case, verdict: str) -> Case | None:
        """A smaller case failing the same way, within the session's budget (once per subject and check)."""
        key = (case.subject, check)
        if not self.shrink_enabled or not declaration(check).shrinks or key in self._shrunk:
            return None
        if self.shrink_seconds_left <= 0:
            return None
        self._shrunk.add(key)
        from conformance.plan.shrink import shrink  # hypothesis' search; imported only on failure

        start = time.perf_counter()
        # The smaller cases get a store of their own: in the session's, dozens of them would
        # evict this case's reference and outputs, which its remaining checks still need.
        session_store, self.store = self.store, ArtifactStore(settled=self.settled)
        try:
            return shrink(
                case,
                self.subjects[case.subject].capabilities,
                lambda c: self._fails_like(check, c, verdict),
                self.shrink_seconds_left,
            )
        finally:
            self.store = session_store
            self.shrink_seconds_left -= time.perf_counter() - start

    def _fails_like(self, check: str, case: Case, verdict: str) -> bool:
        planned = classify(check, case, self.subjects[case.subject].capabilities)
        if planned is None or planned.status != "run":
            return False
        return self.outcome(planned)[0] == verdict


def run_check(case: Case, check: str, impl: str | None = None, profile: str = "ci") -> Outcome:
    """Run one check on one case outside pytest (repro scripts). Raises SubjectError if the subject does."""
    (subject,) = resolve_subjects(impl or case.subject)
    case = dataclasses.replace(case, subject=subject.name)
    runner = Runner((subject,), get(profile), shrink=False)
    planned = classify(check, case, subject.capabilities)
    if planned is None or planned.status not in ("run", "raises"):
        reason = "does not apply" if planned is None else f"{planned.status}: {planned.reason}"
        raise ValueError(f"the {check} check does not run on {case.case_id}: {reason}")
    verdict, result = runner.outcome(planned)
    if isinstance(result, SubjectError):
        raise result
    return result

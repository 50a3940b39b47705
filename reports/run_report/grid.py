"""The subject x feature grid: what each subject passes, fails, or does not support.

A result counts towards every grid feature named in ``CaseResult.features``
(e.g. ``("forward", "bfloat16", "causal_top_left")``). A cell's status is the worst
thing that happened in it, so one failure is never hidden by a hundred passes:
fail > known > flaky > pass > unsupported > unavailable. ``error`` (the check itself
crashed, or the subject did) counts as a failure; ``known`` is a failure the ledger
explains (conformance/judge/known_issues.py), shown apart so it neither hides nor cries wolf.

Features fall into three groups, in this order: checks (any feature that is also
the name of a check), masks and options, dtypes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import Literal

from conformance.suite.check_registry import LABELS as CHECK_LABELS
from conformance.suite.check_registry import REPORT_ORDER
from kernels.contract import features
from kernels.contract.dtypes import DTYPES  # stdlib only: the gate imports this module with no installs
from run_records.results_file import CaseResult

Status = Literal["fail", "known", "flaky", "pass", "unsupported", "unavailable", "not run"]
STATUS_ORDER: tuple[Status, ...] = ("fail", "known", "flaky", "pass", "unsupported", "unavailable", "not run")
FAILED = ("fail", "error")  # failures nobody has explained: they make a run red
NOT_PASSING = (*FAILED, "known")  # what the gate never excuses where the base passed
# Verdicts of a check that ran: anything else (unsupported, unavailable) observed nothing.
CHECKED = ("pass", *NOT_PASSING, "flaky")

# Preferred order inside each group; features not listed follow, alphabetically. The
# checks' order and labels are the registry's (stdlib-only, so the gate still runs bare).
CHECK_ORDER = REPORT_ORDER
# The case features' columns and labels are the feature table's (stdlib only, like the registry);
# ``causal`` and ``mask`` are what records written before it named two of them.
MASK_KINDS = ("causal", *features.grid_order(), "fully_masked")
GROUPS = ("checks", "masks and options", "dtypes")
LABELS = {
    **features.labels(),
    "fully_masked": "fully-masked rows",  # the feature of a case, named like the check
    **CHECK_LABELS,
}


def label(feature: str) -> str:
    """How a person reads a feature name in a report."""
    return LABELS.get(feature, feature.replace("_", " "))


@dataclasses.dataclass(frozen=True)
class Cell:
    counts: tuple[tuple[str, int], ...] = ()  # verdict -> number of results, sorted

    @property
    def tally(self) -> Counter:
        return Counter(dict(self.counts))

    @property
    def total(self) -> int:
        return sum(n for _, n in self.counts)

    @property
    def failed(self) -> int:
        return sum(self.tally[v] for v in FAILED)

    @property
    def status(self) -> Status:
        tally = self.tally
        if self.failed:
            return "fail"
        for status in ("known", "flaky", "pass", "unsupported", "unavailable"):
            if tally[status]:
                return status
        return "not run"


@dataclasses.dataclass(frozen=True)
class Grid:
    subjects: tuple[str, ...]
    features: tuple[str, ...]  # in display order: checks, masks and options, dtypes
    cells: dict[tuple[str, str], Cell]  # (subject, feature) -> cell; "all" holds the subject's total
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (group name, its features), non-empty groups only

    def cell(self, subject: str, feature: str) -> Cell:
        return self.cells.get((subject, feature), Cell())

    def status(self, subject: str, feature: str) -> Status:
        return self.cell(subject, feature).status


def _group(feature: str, checks: set[str]) -> int:
    if feature in checks or feature in CHECK_ORDER:
        return 0
    if feature in DTYPES:
        return 2
    return 1


def _order(feature: str, group: int) -> tuple[int, str]:
    preferred = (CHECK_ORDER, MASK_KINDS, DTYPES)[group]
    return (preferred.index(feature), "") if feature in preferred else (len(preferred), feature)


def _cell(verdicts: Iterable[str]) -> Cell:
    return Cell(tuple(sorted(Counter(verdicts).items())))


def feature_grid(results: Iterable[CaseResult]) -> Grid:
    by_cell: dict[tuple[str, str], list[str]] = {}
    checks: set[str] = set()
    for result in results:
        subject = result.case.subject
        checks.add(result.check)
        by_cell.setdefault((subject, "all"), []).append(result.verdict)
        for feature in result.features:
            by_cell.setdefault((subject, feature), []).append(result.verdict)
    subjects = tuple(sorted({s for s, _ in by_cell}))
    features = {f for _, f in by_cell if f != "all"}
    grouped = []
    for index, name in enumerate(GROUPS):
        members = sorted((f for f in features if _group(f, checks) == index), key=lambda f: _order(f, index))
        if members:
            grouped.append((name, tuple(members)))
    ordered = tuple(f for _, members in grouped for f in members)
    return Grid(
        subjects, ordered, {key: _cell(verdicts) for key, verdicts in by_cell.items()}, tuple(grouped)
    )


def unavailable_subjects(results: Iterable[CaseResult]) -> dict[str, str]:
    """Subjects none of whose results ran, each with the reason it gave."""
    reasons: dict[str, str] = {}
    ran: set[str] = set()
    for result in results:
        subject = result.case.subject
        if result.verdict == "unavailable":
            reasons.setdefault(subject, result.reason or str(result.availability.get("reason", "")))
        else:
            ran.add(subject)
    return {s: r for s, r in sorted(reasons.items()) if s not in ran}


def nothing_checked(results: Iterable[CaseResult]) -> bool:
    """Whether no check ran at all: every subject unavailable, or every planned check
    unsupported or unavailable. Such a run says nothing about its subjects; it is no pass."""
    return not any(r.verdict in CHECKED for r in results)


def not_checked_reasons(results: Iterable[CaseResult]) -> dict[str, str]:
    """Subjects none of whose checks ran, each with why: its unavailability, else its most
    common reasons for unsupported checks (with how many checks each)."""
    by_subject: dict[str, list[CaseResult]] = {}
    for result in results:
        by_subject.setdefault(result.case.subject, []).append(result)
    reasons = {}
    for subject, mine in sorted(by_subject.items()):
        if any(r.verdict in CHECKED for r in mine):
            continue
        unavailable = unavailable_subjects(mine)
        if subject in unavailable:
            reasons[subject] = f"unavailable: {unavailable[subject] or 'no reason given'}"
            continue
        counts = Counter(r.reason or "no reason given" for r in mine if r.verdict == "unsupported")
        top = [f"{reason} (×{n})" for reason, n in counts.most_common(2)]
        more = len(counts) - len(top)
        reasons[subject] = (
            "every check unsupported: " + "; ".join(top) + (f"; +{more} more reasons" if more else "")
        )
    return reasons

"""The subject x feature grid: what each subject passes, fails, or does not support.

A result counts towards every grid column named in ``CaseResult.features``
(e.g. ``("forward", "causal", "bfloat16")``). A cell's status is the worst thing
that happened in it, so one failure is never hidden by a hundred passes:
fail > pass > unsupported > unavailable. ``error`` (the check itself crashed, or
the subject did) counts as a failure.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import Literal

from reports.records import CaseResult

Status = Literal["fail", "pass", "unsupported", "unavailable", "not run"]
STATUS_ORDER: tuple[Status, ...] = ("fail", "pass", "unsupported", "unavailable", "not run")
FAILED = ("fail", "error")

# Column order: direction first, then mask kinds and other options, then dtypes.
# Features not listed here go in the middle, alphabetically.
DIRECTIONS = ("forward", "lse", "backward")
MASK_KINDS = ("causal", "window", "segment_ids", "lengths", "mask", "bias", "softcap", "gqa", "fully_masked")
DTYPES = ("float32", "bfloat16", "float16", "float64")  # same order as kernels.base.DTYPES


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
        for status in ("pass", "unsupported", "unavailable"):
            if tally[status]:
                return status
        return "not run"


@dataclasses.dataclass(frozen=True)
class Grid:
    subjects: tuple[str, ...]
    features: tuple[str, ...]
    cells: dict[tuple[str, str], Cell]  # (subject, feature) -> cell; "all" holds the row total

    def cell(self, subject: str, feature: str) -> Cell:
        return self.cells.get((subject, feature), Cell())

    def status(self, subject: str, feature: str) -> Status:
        return self.cell(subject, feature).status


def feature_order(feature: str) -> tuple[int, int, str]:
    for group, names in enumerate((DIRECTIONS, MASK_KINDS)):
        if feature in names:
            return (group * 2, names.index(feature), feature)
    if feature in DTYPES:
        return (4, DTYPES.index(feature), feature)
    return (3, 0, feature)


def _cell(verdicts: Iterable[str]) -> Cell:
    return Cell(tuple(sorted(Counter(verdicts).items())))


def feature_grid(results: Iterable[CaseResult]) -> Grid:
    by_cell: dict[tuple[str, str], list[str]] = {}
    for result in results:
        subject = result.case.subject
        by_cell.setdefault((subject, "all"), []).append(result.verdict)
        for feature in result.features:
            by_cell.setdefault((subject, feature), []).append(result.verdict)
    subjects = tuple(sorted({s for s, _ in by_cell}))
    features = tuple(sorted({f for _, f in by_cell if f != "all"}, key=feature_order))
    return Grid(subjects, features, {key: _cell(verdicts) for key, verdicts in by_cell.items()})


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

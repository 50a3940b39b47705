"""The known-issue ledger: real defects, kept as data, that a run reports as ``known``.

A ledger is a TOML file of ``[[issue]]`` tables (format: docs/known-issues.md). The
built-in subjects' ledger is ``kernels/known_issues.toml``; ``--known-issues FILE``
merges a user's own. A failing (or erroring) check that an entry matches keeps its
whole record (metrics, reason, repro) and gets the verdict ``known`` plus
``CaseResult.known_issue``, so a run whose every failure is known exits 0.

An entry never changes what a check measures or which cases run: it only names a
failure that is already understood. Entries describe wrong answers; declarations
(``kernels.contract.base.ShapeConstraint``) describe what an API rejects or cannot express.

The pytest plugin matches each record as it is judged; the report tools (``reports/``, a
lower layer) read only the statuses it writes into summary.json. Parsing needs ``packaging``
(PEP 440 specifiers).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from conformance.judge.tolerance import TOLERANCES
from kernels.contract.base import EXECUTIONS  # Availability.execution
from run_records.ledger_file import LedgerError, read_ledger_tables
from run_records.results_file import CaseResult
from versions import table

# A run's libraries: {"jax": "0.12.0.1", "tokamax": "0.0.17"}; None (or absent) where not installed.
Versions = Mapping[str, str | None]
# One range key per library of the version table (versions/table.py): a new library axis is a key.
RANGE_KEYS: tuple[str, ...] = tuple(library.name for library in table.LIBRARIES)

FAILING = ("fail", "error")
_KEYS = {
    "id",
    "subject",
    "checks",
    "cases",
    "features",
    "input_kind",
    "dtype",
    *RANGE_KEYS,
    "reason",
    "tensors",
    "failure",
    "details",
    "execution",
    "variants",
    "bisection",
    "link",
    "summary",
}
_REQUIRED = ("id", "subject", "checks", "link", "summary")
# How a judged tensor fails (``KnownIssue.failure``): non-finite where the reference is finite
# (recorded as an infinite error), or a finite error past its tolerance.
FAILURES = ("nan", "numeric")

Status = Literal["reproduced", "no longer reproduces", "stale", "not run here", "out of range"]


@dataclasses.dataclass(frozen=True)
class KnownIssue:
    """One known defect: which failing checks it explains, where, and its upstream link.

    cases: case-id globs (``fnmatch``), any of which may match; empty matches every case.
    features: grid features (``CaseResult.features``) that must all be present.
    ranges: per library of the version table (``jax``, ``tokamax``: the TOML keys), a PEP 440
    specifier of its releases where the defect reproduces; a library not named (or empty) = any,
    installed or not. An entry applies only where every range holds: a tokamax range never holds
    on a run without tokamax.
    reason: a regular expression the failure's reason must contain (e.g. the compiler's error), so
    an entry for one error never explains another on the same cases.
    execution: "native" or "interpret" (``Availability.execution``): a defect of the compiled
    kernel on its hardware, or of an interpreter only; empty matches both. On a run where the
    subject never ran that way the entry is ``not run here``, never ``no longer reproduces``.
    tensors, failure: the failure's signature, for checks that judge tensors (``forward``,
    ``lse``, ``backward``, ...): every tensor out of tolerance must be one of ``tensors``, and
    fail as ``failure`` says ("nan": non-finite where the reference is finite; "numeric": a
    finite error). A failure inside the selector with another signature is another defect, so
    it stays unexplained. Records without judged tensors (errors, non-numeric checks) are
    matched by the selector and ``reason`` alone.
    details: numbers the failing record's ``details`` must hold, for checks that count their own
    parts (``api_contract``'s ``parts_fail``): an entry for one failing part, ``parts_fail = 1``,
    never explains a record where another part fails too.
    """

    id: str
    subject: str
    checks: tuple[str, ...]
    link: str
    summary: str
    cases: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    input_kind: str | None = None
    dtype: str | None = None
    ranges: tuple[tuple[str, str], ...] = ()
    reason: str | None = None
    tensors: tuple[str, ...] = ()
    failure: str | None = None
    details: tuple[tuple[str, float], ...] = ()
    execution: str | None = None
    # False: the entry covers its subject's own name only, not the variants an option makes (a
    # defect of the adapter's default configuration that another configuration does not have).
    variants: bool = True
    # The release sweep behind ``jax`` (reports/ledger/release_sweep.py): span, reproduces, clean; or
    # not_observable with the reason. Optional for a team's ledger, required of the built-in one.
    bisection: dict[str, Any] | None = dataclasses.field(default=None, compare=False)
    source: str = ""  # the ledger file it came from

    def selects(self, result: CaseResult) -> bool:
        """Whether the entry's selector (subject, check, case, features, dtype) names this result,
        whatever its verdict and the JAX version."""
        case = result.case
        # An entry on a kernel also covers its variants (``tpu_flash[interpreter=tpu]``): the
        # defect is the kernel's, whichever interpreter ran it. Globs see the entry's own name.
        base = case.subject.partition("[")[0]
        case_id = (
            case.case_id if case.subject == self.subject else self.subject + case.case_id[len(case.subject) :]
        )
        return (
            (
                case.subject == self.subject
                or (self.variants and base == self.subject and case.subject.endswith("]"))
            )
            and result.check in self.checks
            and (not self.cases or any(fnmatch.fnmatchcase(case_id, glob) for glob in self.cases))
            and set(self.features) <= set(result.features)
            and (self.input_kind is None or case.input_kind == self.input_kind)
            and (self.dtype is None or case.dtype == self.dtype)
            and (self.execution is None or result.availability.get("execution") == self.execution)
        )

    def explains(self, result: CaseResult) -> bool:
        """Whether this failing (or known) result is the failure the entry describes."""
        return (
            result.verdict in (*FAILING, "known")
            and self.selects(result)
            and (self.reason is None or re.search(self.reason, result.reason) is not None)
            and self.has_signature_of(result)
        )

    def has_signature_of(self, result: CaseResult) -> bool:
        """Whether the tensors out of tolerance fail as the entry's signature says (``tensors``,
        ``failure``); true where the entry states none or the record judged no tensor."""
        if any(result.details.get(key) != value for key, value in self.details):
            return False
        failing = [m for m in result.metrics if not m.passed]
        if self.tensors and any(m.tensor not in self.tensors for m in failing):
            return False
        if self.failure is not None and failing:
            nan = [m for m in failing if m.max_abs == float("inf")]
            return bool(nan) if self.failure == "nan" else not nan
        return True

    def range_of(self, library: str) -> str:
        """The entry's specifier for one library; ``""`` (any) when it names none."""
        return dict(self.ranges).get(library, "")

    @property
    def jax(self) -> str:
        return self.range_of("jax")

    @property
    def tokamax(self) -> str:
        return self.range_of("tokamax")

    def in_range(self, versions: Versions) -> bool:
        """Whether this run's libraries (``{"jax": "0.10.2", "tokamax": None}``) lie inside every range
        of the entry (an empty range holds for any version, and for none installed)."""
        return all(_holds(spec, versions.get(library)) for library, spec in self.ranges)

    def as_record(self) -> dict[str, str]:
        """What a ``known`` record carries (``CaseResult.known_issue``)."""
        return {"id": self.id, "link": self.link, "summary": self.summary}


@dataclasses.dataclass(frozen=True)
class Ledger:
    issues: tuple[KnownIssue, ...] = ()
    files: tuple[str, ...] = ()

    def match(self, result: CaseResult, versions: Versions) -> KnownIssue | None:
        """The first entry in range of this run's libraries that explains this failing result, else None."""
        if result.verdict not in FAILING:
            return None
        return next((i for i in self.issues if i.in_range(versions) and i.explains(result)), None)

    def apply(self, result: CaseResult, versions: Versions) -> CaseResult:
        """The record with verdict ``known`` when an entry explains it; otherwise unchanged."""
        issue = self.match(result, versions)
        if issue is None:
            return result
        return dataclasses.replace(result, verdict="known", known_issue=issue.as_record())


def load_ledger(paths: Iterable[Path], *, subjects: Iterable[str], checks: Iterable[str]) -> Ledger:
    """Read and validate ledgers, in order. Raises LedgerError (one line) on bad TOML, an unknown
    key, subject or check, an invalid specifier or glob-less selector, or a duplicate id."""
    subjects, checks = set(subjects), set(checks)
    issues: list[KnownIssue] = []
    seen: dict[str, str] = {}
    files = []
    for path in paths:
        path = Path(path)
        files.append(str(path))
        for number, raw in enumerate(read_ledger_tables(path), start=1):
            issue = _entry(path, number, raw, subjects, checks)
            if issue.id in seen:
                raise LedgerError(
                    f"{path}: entry {issue.id!r} duplicates the id of an entry in "
                    f"{seen[issue.id]}; give each entry its own id"
                )
            seen[issue.id] = str(path)
            issues.append(issue)
    return Ledger(tuple(issues), tuple(files))


def _entry(path: Path, number: int, raw: Any, subjects: set[str], checks: set[str]) -> KnownIssue:
    name = raw.get("id", f"#{number}") if isinstance(raw, dict) else f"#{number}"
    where = f"{path}: entry {name!r}"
    if not isinstance(raw, dict):
        raise LedgerError(f"{where}: not a table; write it as [[issue]] with key = value lines")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise LedgerError(f"{where}: missing {', '.join(missing)}; every entry needs {', '.join(_REQUIRED)}")
    unknown = set(raw) - _KEYS
    if unknown:
        raise LedgerError(f"{where}: unknown key(s) {sorted(unknown)}; known keys are {sorted(_KEYS)}")
    if "bisection" in raw and not isinstance(raw["bisection"], dict):
        raise LedgerError(
            f'{where}: bisection must be a table, e.g. bisection = {{ span = ["0.4.35", "0.10.2"], '
            'reproduces = ["0.7.2"], clean = ["0.7.0"] }'
        )
    unknown_tensors = sorted(set(raw.get("tensors", ())) - set(TOLERANCES))
    if unknown_tensors:
        raise LedgerError(f"{where}: unknown tensor(s) {unknown_tensors}; tensors are {sorted(TOLERANCES)}")
    if raw.get("failure", "nan") not in FAILURES:
        raise LedgerError(f"{where}: failure = {raw['failure']!r}; write one of {', '.join(FAILURES)}")
    if raw.get("execution", "native") not in EXECUTIONS:
        raise LedgerError(f"{where}: execution = {raw['execution']!r}; write one of {', '.join(EXECUTIONS)}")
    for key in ("id", "subject", "link", "summary", *RANGE_KEYS, "dtype", "input_kind", "reason"):
        if key in raw and not (isinstance(raw[key], str) and (raw[key].strip() or key in RANGE_KEYS)):
            raise LedgerError(f"{where}: {key} must be a non-empty string")
    details = raw.get("details", {})
    if not isinstance(details, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in details.values()
    ):
        raise LedgerError(f"{where}: details must be a table of numbers, e.g. details = {{ parts_fail = 1 }}")
    if not isinstance(raw.get("variants", True), bool):
        raise LedgerError(
            f"{where}: variants must be true or false (false: this name only, not its variants)"
        )
    for key in ("checks", "cases", "features", "tensors"):
        if key in raw and not (isinstance(raw[key], list) and all(isinstance(v, str) for v in raw[key])):
            raise LedgerError(f'{where}: {key} must be a list of strings, e.g. {key} = ["forward"]')
    # A variant (``splash[interpreter=tpu]``) names a defect only that variant shows, such as
    # one of TPU interpret mode's own; the kernel's name covers every variant.
    if raw["subject"].partition("[")[0] not in subjects:
        raise LedgerError(
            f"{where}: unknown subject {raw['subject']!r}; known subjects are {sorted(subjects)}"
            " (a variant is written NAME[key=value], e.g. splash[interpreter=tpu])"
        )
    bad = sorted(set(raw["checks"]) - checks)
    if bad or not raw["checks"]:
        raise LedgerError(f"{where}: unknown check(s) {bad or '(none given)'}; checks are {sorted(checks)}")
    ranges = tuple((key, raw[key].strip()) for key in RANGE_KEYS if raw.get(key, "").strip())
    for key, value in ranges:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            example = f">={table.library(key).matrix[0]},<{table.library(key).newest}"
            raise LedgerError(
                f'{where}: {key} = {value!r} is not a PEP 440 specifier; write e.g. "{example}"'
            ) from None
    try:
        re.compile(raw.get("reason", ""))
    except re.error as exc:
        raise LedgerError(
            f"{where}: reason is not a regular expression ({exc}); escape its special characters"
        ) from None
    return KnownIssue(
        id=raw["id"],
        subject=raw["subject"],
        checks=tuple(raw["checks"]),
        link=raw["link"].strip(),
        summary=raw["summary"].strip(),
        cases=tuple(raw.get("cases", ())),
        features=tuple(raw.get("features", ())),
        input_kind=raw.get("input_kind"),
        dtype=raw.get("dtype"),
        ranges=ranges,
        reason=raw.get("reason"),
        tensors=tuple(raw.get("tensors", ())),
        failure=raw.get("failure"),
        details=tuple(sorted((key, float(value)) for key, value in details.items())),
        execution=raw.get("execution"),
        variants=raw.get("variants", True),
        bisection=raw.get("bisection"),
        source=str(path),
    )


def ledger_status(
    ledger: Ledger,
    results: Iterable[CaseResult],
    versions: Versions,
    subjects_run: Iterable[str],
    *,
    narrowed: bool = False,
) -> list[dict[str, Any]]:
    """Per entry, what this run saw (written to summary.json, read by report, matrix and gate):

    * ``reproduced``: in range, and at least one check it selects failed (now ``known``);
    * ``no longer reproduces``: in range, checks it selects ran and passed, and none failed as it
      describes (checks that all failed as something else leave it ``not run here``: masked);
    * ``stale``: its subject ran, but its selector names no check that ran (a typo, or a case
      the plan no longer holds);
    * ``not run here``: its subject did not run, or every check it selects was unsupported, or
      the run was ``narrowed`` (``-k``, ``-m``, ``--deselect``) so its checks may just be left out;
    * ``out of range``: one of this run's ``versions`` (None: not installed) is outside the entry's
      range for that library; ``failing_outside_range`` counts the
      failures its selector would have explained, so a wrong range shows.
    """
    results = list(results)
    ran_names = set(subjects_run)
    available_names = {r.case.subject for r in results if r.verdict != "unavailable"}
    # a variant (``tpu_flash[interpreter=tpu]``) running counts for the kernel's own entries, unless
    # the entry covers its own name only (``variants = false``)
    ran_subjects = ran_names | {name.partition("[")[0] for name in ran_names}
    available = available_names | {name.partition("[")[0] for name in available_names}
    executions = {(r.case.subject.partition("[")[0], r.availability.get("execution")) for r in results}
    statuses = []
    for issue in ledger.issues:
        selected = [r for r in results if issue.selects(r)]
        ran = [r for r in selected if r.verdict not in ("unsupported", "unavailable")]
        failing = [r for r in ran if issue.explains(r)]
        # Evidence that it is gone: its checks passing. One failing as another defect (every call of
        # tokamax 0.0.10's Triton raising TypeError) could not have shown this one.
        passing = [r for r in ran if r.verdict == "pass"]
        entry: dict[str, Any] = {
            "id": issue.id,
            "subject": issue.subject,
            "checks": list(issue.checks),
            **{library: issue.range_of(library) for library in RANGE_KEYS},
            "link": issue.link,
            "summary": issue.summary,
            "source": issue.source,
            "matched": sorted(f"{r.check}[{r.case.case_id}]" for r in failing),
        }
        if not issue.in_range(versions):
            status: Status = "out of range"
            entry["matched"] = []
            # Failures another (in-range) entry explains are no evidence against this one's range.
            entry["failing_outside_range"] = sum(
                1 for r in failing if r.verdict != "known" or r.known_issue.get("id") == issue.id
            )
            entry["ran_outside_range"] = len(passing)  # with no failure: clean evidence (ledger sweeps)
        elif failing:
            status = "reproduced"
        elif passing:
            status = "no longer reproduces"
            entry["passing"] = len(passing)
        elif (
            issue.subject in (ran_subjects if issue.variants else ran_names)
            and issue.subject in (available if issue.variants else available_names)
            and (issue.execution is None or (issue.subject, issue.execution) in executions)
            and not selected
            and not narrowed
        ):
            status = "stale"
        else:
            status = "not run here"
            if ran:  # every check it selects failed as another defect: it could not show
                entry["masked"] = len(ran)
        entry["status"] = status
        statuses.append(entry)
    return statuses


def _holds(specifier: str, version: str | None) -> bool:
    """An empty specifier holds for anything (no library installed included); any other needs a
    version inside it."""
    if not specifier:
        return True
    if version is None:
        return False
    try:
        return Version(version) in SpecifierSet(specifier, prereleases=True)
    except InvalidVersion:
        return False


def strict_problems(statuses: Iterable[dict[str, Any]]) -> list[str]:
    """What ``--strict-known`` turns into a failing exit: entries that no longer reproduce, stale ones."""
    return [f"{s['id']}: {s['status']}" for s in statuses if s["status"] in ("no longer reproduces", "stale")]

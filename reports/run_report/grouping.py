"""Failing checks grouped by cause: one *finding* per case template.

One defect shows as many failing checks: a case whose mask is wrong fails ``forward``,
``lse``, ``finite`` and ``fully_masked``, in float32 and in bfloat16. A report that
prints each (check, case, dtype) apart says the same thing eight times. A finding
gathers them:

* the **case template** is the case without its dtype: the same subject, shape,
  masks, options and input kind (the case id with its dtype token replaced by ``*``,
  e.g. ``tpu_flash-*-causal_tl-B2-Hq4-Hkv4-Sq128-Sk256-D128``); every check and dtype
  of one template is one finding;
* a failure that was **shrunk** to a smaller failing case also joins the finding of
  that minimal case's template, so distinct cases that shrink to the same minimal
  case (and the minimal case's own failures) are one finding.

This module is the one place that decides what belongs together; report.md, the gate
and the matrix all group through ``group_failures``. Standard library only (the gate
runs bare).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable

from kernels.contract.dtypes import DTYPES
from reports.run_report.describe import excess, worst_metric
from reports.run_report.grid import CHECK_ORDER
from reports.run_report.markdown import plural
from run_records.results_file import MINIMAL_CASE_KEY, CaseResult

_SHRUNK_LINE = re.compile(r"^Shrunk to a smaller failing case: (?P<id>\S+)", re.MULTILINE)
ANY_DTYPE = "*"


def template_id(case_id: str, dtype: str | None = None) -> str:
    """The case id with its dtype token replaced by ``*``: ``flash-*-causal_tl-B2-...``.

    ``dtype`` is the case's own; without it (a minimal case known only by its id) the
    first token that names a dtype the suite knows is replaced."""
    tokens = case_id.split("-")
    names = (dtype,) if dtype else DTYPES
    for position, token in enumerate(tokens):
        if token in names:
            tokens[position] = ANY_DTYPE
            break
    return "-".join(tokens)


def template_key(result: CaseResult) -> tuple[str, str]:
    """(subject, template id): what a failure has in common with the same case's other
    checks and dtypes."""
    return (result.case.subject, template_id(result.case.case_id, result.case.dtype))


def minimal_case_id(result: CaseResult) -> str | None:
    """The id of the smaller failing case this failure was shrunk to, if shrinking ran."""
    recorded = result.details.get(MINIMAL_CASE_KEY)
    if isinstance(recorded, str) and recorded:
        return recorded
    found = _SHRUNK_LINE.search(result.reason or "")
    return found["id"] if found else None


@dataclasses.dataclass(frozen=True)
class FailureGroup:
    """One finding: failing checks of one case template (and of the cases shrunk into it)."""

    results: tuple[CaseResult, ...]  # in check order, then dtype order, then case id

    @property
    def subject(self) -> str:
        return self.results[0].case.subject

    @property
    def templates(self) -> tuple[str, ...]:
        """The case templates it spans (more than one only when shrinking joined them)."""
        return tuple(sorted({template_key(r)[1] for r in self.results}))

    @property
    def label(self) -> str:
        """The template, or the first one and how many more."""
        first, *more = self.templates
        return first + (f" (+{len(more)} more {'case' if len(more) == 1 else 'cases'})" if more else "")

    @property
    def case_ids(self) -> tuple[str, ...]:
        return tuple(sorted({r.case.case_id for r in self.results}))

    @property
    def checks(self) -> tuple[str, ...]:
        return tuple(_ordered({r.check for r in self.results}, CHECK_ORDER))

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(_ordered({r.case.dtype for r in self.results}, DTYPES))

    @property
    def minimal_case_ids(self) -> tuple[str, ...]:
        return tuple(sorted({m for r in self.results if (m := minimal_case_id(r))}))

    @property
    def worst(self) -> CaseResult:
        """The member whose worst tensor is furthest over its tolerance (max-abs error /
        tolerance); a member with measurements before one without (a crash); see ``_severity``."""
        return max(self.results, key=_severity)

    @property
    def worst_excess(self) -> float | None:
        """The worst member's error over tolerance, None when no member measured one."""
        metric = worst_metric(self.worst)
        return None if metric is None else excess(metric)

    @property
    def repro_result(self) -> CaseResult | None:
        """The member whose repro script the report shows: a shrunk member's (its script
        rebuilds the smaller case), else the worst member's; None when none has a script."""
        scripted = [r for r in self.results if r.repro]
        if not scripted:
            return None
        shrunk = [r for r in scripted if minimal_case_id(r)]
        return max(shrunk or scripted, key=_severity)

    def summary(self) -> str:
        """E.g. 'forward, lse, finite, fully_masked fail in float32 and bfloat16'."""
        verdicts = {r.verdict for r in self.results}
        many = len(self.checks) > 1
        if verdicts <= {"error"}:
            verb = "error" if many else "errors"
        elif "error" in verdicts and "fail" in verdicts:
            verb = "fail or error"
        else:
            verb = "fail" if many else "fails"
        return f"{', '.join(self.checks)} {verb} in {_and(self.dtypes)}"


def _ordered(names: set[str], order: Iterable[str]) -> list[str]:
    rank = {name: i for i, name in enumerate(order)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def _and(words: tuple[str, ...]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _severity(result: CaseResult) -> tuple[int, float, bool]:
    """Measured before unmeasured, then further over tolerance, then a member that ran (it has
    a repro script) before one that did not (a check skipped after its case crashed the worker)."""
    metric = worst_metric(result)
    if metric is None:
        return (0, 0.0, bool(result.repro))
    value = excess(metric)
    return (1, value if not math.isnan(value) else math.inf, bool(result.repro))


def group_failures(results: Iterable[CaseResult]) -> list[FailureGroup]:
    """The findings among ``results`` (pass only the ones to group, e.g. the failing ones).

    Members join when they share a case template, or when one's shrunk case has the
    other's template (transitively). Ordered by subject, then by size (most failing
    checks first), then by template."""
    results = list(results)
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(key: tuple[str, str]) -> tuple[str, str]:
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for result in results:
        own = root(template_key(result))
        minimal = minimal_case_id(result)
        if minimal:
            other = root((result.case.subject, template_id(minimal)))
            if other != own:
                parent[max(own, other)] = min(own, other)  # the smaller key leads: deterministic
    members: dict[tuple[str, str], list[CaseResult]] = {}
    for result in results:
        members.setdefault(root(template_key(result)), []).append(result)
    check_rank = {c: i for i, c in enumerate(CHECK_ORDER)}
    dtype_rank = {d: i for i, d in enumerate(DTYPES)}

    def member_order(r: CaseResult) -> tuple:
        return (
            check_rank.get(r.check, len(check_rank)),
            r.check,
            dtype_rank.get(r.case.dtype, len(dtype_rank)),
            r.case.dtype,
            r.case.case_id,
        )

    groups = [FailureGroup(tuple(sorted(group, key=member_order))) for group in members.values()]
    return sorted(groups, key=lambda g: (g.subject, -len(g.results), g.templates))


def count_line(groups: list[FailureGroup], what: str = "failing check") -> str:
    """'3 findings (11 failing checks)'."""
    return f"{plural(len(groups), 'finding')} ({plural(sum(len(g.results) for g in groups), what)})"


# --- root causes --------------------------------------------------------------------------
#
# A finding is one case template; a defect usually spans many templates (the backward kernels
# carry no cost estimate in every case that has a backward pass). A *root cause* gathers them:
#
# * a failure the ledger explains belongs to its **ledger entry**: one cause per entry, however
#   many cases, checks and dtypes it matched;
# * an unexplained finding belongs to the cause keyed by its subject, its set of failing checks
#   and the **signature** of their messages: each member's reason (first line, shrink note left
#   out) with its numbers and index lists stripped, so "max-abs 0.31 ... worst at [0, 1, 7, 3]"
#   and "max-abs 2.5 ... worst at [1, 0, 2, 9]" say the same thing.
#
# report.md, the gate and the matrix count root causes; findings stay the unit inside one.

KNOWN_CAUSE = "known"
UNEXPLAINED_CAUSE = "unexplained"
# A number that is not part of a name ("float32", "Sq128" keep theirs): a value, an index, a size.
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_\d])")
_INDEX_LIST = re.compile(r"\[[#,\s]*\]")
_SPACES = re.compile(r"\s+")


def message_signature(reason: str) -> str:
    """A failure message without its numbers: what two instances of one defect have in common.

    'out: OUT OF TOLERANCE; max-abs 0.31 ... worst at [0, 1, 7, 3]' -> 'out: OUT OF TOLERANCE;
    max-abs # ... worst at [#]'. The shrink note is left out (it names another case)."""
    lines = [line for line in (reason or "").strip().splitlines() if not _SHRUNK_LINE.match(line)]
    first = lines[0] if lines else ""
    stripped = _INDEX_LIST.sub("[#]", _NUMBER.sub("#", first))
    return _SPACES.sub(" ", stripped).strip()


def case_size(result: CaseResult) -> tuple[int, str]:
    """How big a case is to rerun (elements of the score matrix times head dims), then its id."""
    c = result.case
    return (c.batch * max(c.q_heads, 1) * max(c.q_len, 1) * max(c.kv_len, 1) * max(c.head_dim, 1), c.case_id)


@dataclasses.dataclass(frozen=True)
class RootCause:
    """One defect: a ledger entry's failures, or unexplained findings that fail the same checks
    with the same message; its findings are case templates, largest first."""

    kind: str  # KNOWN_CAUSE or UNEXPLAINED_CAUSE
    key: tuple[str, ...]  # (entry id,) or (subject, checks, signature)
    findings: tuple[FailureGroup, ...]

    @property
    def results(self) -> tuple[CaseResult, ...]:
        return tuple(r for f in self.findings for r in f.results)

    @property
    def entry(self) -> str | None:
        """The ledger entry's id, for a known cause."""
        return self.key[0] if self.kind == KNOWN_CAUSE else None

    @property
    def link(self) -> str:
        """The ledger entry's link, for a known cause ('' otherwise)."""
        return next((str(r.known_issue.get("link", "")) for r in self.results if r.known_issue), "")

    @property
    def subjects(self) -> tuple[str, ...]:
        return tuple(sorted({r.case.subject for r in self.results}))

    @property
    def subject(self) -> str:
        return ", ".join(self.subjects)

    @property
    def case_ids(self) -> tuple[str, ...]:
        return tuple(sorted({r.case.case_id for r in self.results}))

    @property
    def checks(self) -> tuple[str, ...]:
        return tuple(_ordered({r.check for r in self.results}, CHECK_ORDER))

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(_ordered({r.case.dtype for r in self.results}, DTYPES))

    @property
    def smallest(self) -> CaseResult:
        """The member on the smallest case: the one to read first and to rerun."""
        return min(self.results, key=lambda r: (case_size(r), r.check))

    @property
    def worst(self) -> CaseResult:
        """The member furthest over its tolerance (as ``FailureGroup.worst``)."""
        return max(self.results, key=_severity)

    @property
    def repro_result(self) -> CaseResult | None:
        """The member whose repro script stands for the cause: a shrunk member's (its smaller
        case), else the smallest case's, else the worst member's; None when none has a script."""
        scripted = [r for r in self.results if r.repro]
        if not scripted:
            return None
        shrunk = [r for r in scripted if minimal_case_id(r)]
        if shrunk:
            return max(shrunk, key=_severity)
        return min(scripted, key=lambda r: (case_size(r), -_severity(r)[0], r.check))

    def summary(self) -> str:
        """E.g. 'observable fails in float32 and bfloat16' (the checks and dtypes it spans)."""
        verdicts = {r.verdict for r in self.results}
        many = len(self.checks) > 1
        if verdicts <= {"error"}:
            verb = "error" if many else "errors"
        elif "error" in verdicts and verdicts & {"fail", "known"}:
            verb = "fail or error"
        else:
            verb = "fail" if many else "fails"
        return f"{', '.join(self.checks)} {verb} in {_and(self.dtypes)}"


def cause_key(group: FailureGroup) -> tuple[str, tuple[str, ...]]:
    """(kind, key) of the cause an unexplained finding belongs to."""
    signatures = sorted({message_signature(r.reason) for r in group.results})
    return UNEXPLAINED_CAUSE, (group.subject, ",".join(group.checks), " | ".join(signatures))


def group_causes(results: Iterable[CaseResult]) -> list[RootCause]:
    """The root causes among ``results`` (pass only failing ones: fail, error or known).

    Known failures join their ledger entry's cause; unexplained ones are grouped into findings
    (``group_failures``), then findings into causes (``cause_key``). Ordered: unexplained
    causes first (by subject, then most cases first), then known ones (most cases first)."""
    results = list(results)
    known: dict[str, list[CaseResult]] = {}
    for r in results:
        if r.verdict == "known":
            known.setdefault(str(r.known_issue.get("id", "?")), []).append(r)
    buckets: dict[tuple[str, ...], list[FailureGroup]] = {}
    for group in group_failures(r for r in results if r.verdict != "known"):
        buckets.setdefault(cause_key(group)[1], []).append(group)
    causes = [RootCause(UNEXPLAINED_CAUSE, key, tuple(groups)) for key, groups in buckets.items()]
    causes.sort(key=lambda c: (c.subjects, -len(c.case_ids), -len(c.results), c.key))
    known_causes = [
        RootCause(KNOWN_CAUSE, (entry,), tuple(group_failures(rs))) for entry, rs in known.items()
    ]
    known_causes.sort(key=lambda c: (-len(c.case_ids), -len(c.results), c.key))
    return causes + known_causes


def cause_count_line(causes: list[RootCause], what: str = "failing check") -> str:
    """'2 root causes (11 failing checks in 7 cases)'."""
    checks = sum(len(c.results) for c in causes)
    cases = len({(r.case.subject, r.case.case_id) for c in causes for r in c.results})
    return f"{plural(len(causes), 'root cause')} ({plural(checks, what)} in {plural(cases, 'case')})"


def known_count_line(causes: list[RootCause]) -> str:
    """'54 known failures from 2 known issues'."""
    known = [c for c in causes if c.kind == KNOWN_CAUSE]
    failures = sum(len(c.results) for c in known)
    return f"{plural(failures, 'known failure')} from {plural(len(known), 'known issue')}"

"""The gate's verdict as Markdown, for a terminal or a review: the verdict line, one table per
rule (failing checks grouped by root cause, with their repro command), fixes, flaky checks, notes
and the thresholds in force."""

from __future__ import annotations

from pathlib import Path

from reports.gate.findings import (
    GROUPED_RULES,
    RULES,
    Finding,
    GateResult,
)
from reports.gate.library_change import library_change
from reports.gate.thresholds import THRESHOLDS
from reports.run_report import markdown as md
from reports.run_report.grouping import cause_count_line, group_causes
from reports.run_report.render import repro_path
from run_records.environment import one_line
from run_records.run_folder import Run

MAX_ROWS = 50


def _run_line(role: str, run: Run) -> str:
    state = "complete" if run.complete else "⚠️ **incomplete**"
    env = one_line(run.environment) if run.environment else "environment unknown"
    return f"**{role}:** {run.label} · {state} · {len(run.results)} checks · {env}"


def _finding_rows(findings: list[Finding], folder: Path | None = None) -> list[list[str]]:
    if findings and findings[0].rule in GROUPED_RULES:
        return _grouped_rows(findings, folder)
    rows = [[f.subject or "—", f.what, f.base, f.candidate, f.detail] for f in findings[:MAX_ROWS]]
    if len(findings) > MAX_ROWS:
        rows.append(["…", f"and {len(findings) - MAX_ROWS} more", "", "", ""])
    return rows


def _grouped_rows(findings: list[Finding], folder: Path | None = None) -> list[list[str]]:
    """One row per root cause (``reports.run_report.grouping``: a ledger entry, or the same checks failing
    with the same message): its checks and dtypes, how many cases, the smallest one, the verdicts
    on each side, the worst check's detail and, for the candidate's failures, the repro command
    of its script in ``folder``."""
    by_key = {f.result.key: f for f in findings if f.result is not None}
    causes = group_causes(f.result for f in findings if f.result is not None)
    rows = []
    for cause in causes[:MAX_ROWS]:
        members = [by_key[r.key] for r in cause.results]
        worst = by_key[cause.worst.key]
        smallest = cause.smallest
        what = (
            f"{', '.join(cause.checks)} ({', '.join(cause.dtypes)}) · "
            f"{md.plural(len(cause.case_ids), 'case')}, smallest {smallest.case.case_id}"
        )
        if cause.entry:
            what += f" · known issue {md.code(cause.entry)}"
        chosen = cause.repro_result
        repro = (
            md.code(f"python {_display(folder)}/{repro_path(chosen)}")
            if folder is not None and chosen is not None and chosen.repro
            else "—"
        )
        if len(members) == 1:
            rows.append([worst.subject, worst.what, worst.base, worst.candidate, worst.detail, repro])
            continue
        rows.append(
            [
                cause.subject,
                what,
                ", ".join(sorted({f.base for f in members})),
                ", ".join(sorted({f.candidate for f in members})),
                f"worst: {cause.worst.check} in {cause.worst.case.dtype}: {worst.detail}",
                repro,
            ]
        )
    if len(causes) > MAX_ROWS:
        rows.append(["…", f"and {len(causes) - MAX_ROWS} more root causes", "", "", "", ""])
    rows += [
        [f.subject or "—", f.what, f.base, f.candidate, f.detail, "—"] for f in findings if f.result is None
    ]
    return rows


def _display(folder: Path) -> str:
    """A folder as a command line names it: relative to the working directory when inside it."""
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder)


def _tally(rule: str, findings: list[Finding]) -> tuple[int, str]:
    """How many regressions a rule's findings count as, and that count in words: failing checks
    count once per root cause ('2 root causes (5 failing checks in 3 cases)'), anything else once each."""
    if rule not in GROUPED_RULES:
        return len(findings), str(len(findings))
    causes = group_causes(f.result for f in findings if f.result is not None)
    loose = sum(f.result is None for f in findings)
    what = "failing check" if rule == "newly failing" else "check"
    return len(causes) + loose, cause_count_line(causes, what) + (f" + {loose}" if loose else "")


def _findings_table(rule: str, findings: list[Finding], folder: Path | None = None) -> str:
    header = ["subject", "what", "base", "candidate", "detail"]
    if rule in GROUPED_RULES:
        header.append("repro (in the candidate's folder)" if folder is not None else "repro")
    return md.table(header, _finding_rows(findings, folder))


def render_gate(result: GateResult) -> str:
    """The gate's verdict as Markdown, for a terminal or a review."""
    base, cand = result.base, result.candidate
    by_rule: dict[str, list[Finding]] = {}
    for finding in result.regressions:
        by_rule.setdefault(finding.rule, []).append(finding)
    tallies = {rule: _tally(rule, findings) for rule, findings in by_rule.items()}
    change = library_change(base, cand)  # which library the verdict is about: jax, tokamax or both
    if result.passed:
        verdict = (
            f"## ✅ Upgrade gate: PASS — {cand.label} has no regression against {base.label} "
            f"({md.plural(result.compared, 'check')} compared, {len(result.fixed)} fixed; {change.words()})"
        )
    else:
        count = sum(n for n, _ in tallies.values())
        verdict = (
            f"## ❌ Upgrade gate: FAIL — {md.plural(count, 'regression')} in "
            f"{cand.label} against {base.label} ({md.plural(result.compared, 'check')} compared; "
            f"{change.words()})"
        )
    parts = [verdict, "", f"**Upgrade:** {change.line()}", ""]
    parts += [_run_line("Base", base), "", _run_line("Candidate", cand), ""]
    if by_rule:
        parts += [
            md.table(["rule", "regressions"], [[RULES[r], tallies[r][1]] for r in by_rule], "lr"),
            "",
        ]
    for rule, findings in by_rule.items():
        heading = f": {tallies[rule][1]}" if rule in GROUPED_RULES else f" ({tallies[rule][1]})"
        parts += [
            f"### ❌ {RULES[rule]}{heading}",
            "",
            _findings_table(rule, findings, cand.folder),
            "",
        ]
    if result.fixed:
        parts += [
            f"### ✅ Fixed: {_tally('fixed', list(result.fixed))[1]}",
            "",
            _findings_table("fixed", list(result.fixed)),
            "",
        ]
    if result.flaky:
        parts += [
            f"### 🎲 Flaky in the candidate ({len(result.flaky)}, not counted)",
            "",
            md.table(
                ["subject", "what", "base", "candidate", "first attempt"], _finding_rows(list(result.flaky))
            ),
            "",
        ]
    if result.notes:
        parts += ["### Notes", "", *[f"- {note}" for note in result.notes], ""]
    parts.append(
        f"<sub>Thresholds: {result.thresholds.summary_line()}. Change them with "
        f"{', '.join(md.code(t.option) for t in THRESHOLDS)}.</sub>"
    )
    return "\n".join(parts) + "\n"

"""report.md: one run, for a code review.

The first screen holds what a reviewer needs, in this order: the verdict line (FAIL, PASS, or
NOT RUN when nothing was checked), the environment, the failures nobody has explained grouped
by **root cause** (``reports.run_report.grouping``: one row per cause with its cases counted, the smallest
case, the worst element and one repro command), then one line per subject (passed, failing,
known, unsupported, unavailable, how it ran; under it, each distinct warning the subject raised
while the suite called it). Everything else follows folded (``<details>``):
each root cause in full, the known issues, the grid, the unsupported combinations, what holds on
hardware, flaky checks, observed behaviour and pairwise coverage. A run without its end record
is marked incomplete at the very top.

report.md stays within ``BUDGET_CHARS``, well inside a GitHub review comment (``MAX_CHARS``).
When it cannot show every root cause in full, the causes past the first ones keep only their
table row and ``details.md`` beside it holds the whole report.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from reports.run_report import markdown as md
from reports.run_report.describe import (
    describe_case,
    describe_tolerance,
    describe_worst_element,
    excess,
    worst_metric,
)
from reports.run_report.fidelity import fidelity_section
from reports.run_report.grid import (
    CHECKED,
    FAILED,
    Grid,
    feature_grid,
    label,
    not_checked_reasons,
    nothing_checked,
    unavailable_subjects,
)
from reports.run_report.grouping import (
    RootCause,
    cause_count_line,
    group_causes,
    known_count_line,
    minimal_case_id,
)
from reports.run_report.pairwise_table import pairwise_section
from reports.run_report.plots import RUN_PLOT, plot_run
from reports.run_report.precision import precision_section
from run_records.environment import one_line
from run_records.results_file import RESULTS_FILE, UNDECLARED_JAX_RUNTIME, CaseResult, write_text_atomic
from run_records.run_folder import Run, load_run

REPORT_FILE = "report.md"
REPRO_DIR = "repro"  # repro/<check>/<case id>.py: each recorded repro script, beside report.md
DETAILS_FILE = "details.md"  # the whole report, every root cause in full, when report.md is abridged
DETAILS_LINK = f"[{DETAILS_FILE}]({DETAILS_FILE})"
MAX_CHARS = 65_536  # the most characters GitHub accepts in a review comment
# What report.md aims at: well under MAX_CHARS, so a comment can quote it with a few lines of
# its own; past it, the causes in full and the long folds go to details.md (never cut silently).
BUDGET_CHARS = 40_000
MAX_DETAILS = 20  # root causes shown in full (folded) in report.md; the rest keep their table row
MAX_LISTED = 200  # rows of the causes' table; the rest are counted (and in details.md)
MAX_MEMBERS = 24  # rows of one cause's table of case templates


@dataclasses.dataclass(frozen=True)
class Rendered:
    report: str  # report.md, at most the budget (BUDGET_CHARS unless told otherwise)
    details: str | None  # details.md: the unabridged report; None when report.md holds everything


def write_report(
    report_dir: Path, *, plots: bool = True, max_details: int = MAX_DETAILS, max_chars: int = BUDGET_CHARS
) -> Path:
    """Render ``report_dir/report.md`` (and its plot, and ``details.md`` when report.md is
    abridged) from results.jsonl and summary.json.

    Returns the report's path. Raises ResultsFileError on unreadable input.
    """
    run = load_run(Path(report_dir))
    plot_note = None
    if plots:
        plot_note = _plot(run)
    write_repro_scripts(run)
    rendered = render(run, plot_note=plot_note, max_details=max_details, max_chars=max_chars)
    details = run.folder / DETAILS_FILE
    if rendered.details is not None:
        write_text_atomic(details, rendered.details)  # first, so report.md's link never dangles
    path = run.folder / REPORT_FILE
    write_text_atomic(path, rendered.report)
    if rendered.details is None and details.exists():
        details.unlink()  # an earlier, longer render's: it would describe other results
    return path


def repro_path(result: CaseResult) -> str:
    """Where ``write_repro_scripts`` puts a result's script, relative to the report folder."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", result.case.case_id)
    return f"{REPRO_DIR}/{result.check}/{name}.py"


def write_repro_scripts(run: Run) -> list[Path]:
    """Write every recorded repro script to ``repro/<check>/<case id>.py``; scripts left there by an
    earlier render of this folder that no result holds any more are removed."""
    wanted = {repro_path(r): r.repro for r in run.results if r.repro}
    folder = run.folder / REPRO_DIR
    if folder.is_dir():
        for stale in folder.glob("*/*.py"):
            if stale.relative_to(run.folder).as_posix() not in wanted:
                stale.unlink()
    written = []
    for relative, text in sorted(wanted.items()):
        path = run.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        # No fsync: each is written again from results.jsonl by every render (594 fsyncs took
        # 0.6-2 s at the end of --impl all).
        write_text_atomic(path, text, sync=False)
        written.append(path)
    return written


def _plot(run: Run) -> str | None:
    """Draw the run's plot; returns the Markdown line that links it (or says why there is none)."""
    try:
        drawn = plot_run(
            run.results, run.folder / RUN_PLOT, title=f"Error ratio against sequence length · {run.label}"
        )
    except ImportError:
        return "_No plot: matplotlib is not installed in this environment._"
    if drawn is None:
        return None
    return f"📈 [Error ratio against sequence length, per subject and dtype]({RUN_PLOT})"


def verdict_counts(results: tuple[CaseResult, ...]) -> Counter:
    counts = Counter(r.verdict for r in results)
    counts["failed"] = sum(counts[v] for v in FAILED)
    return counts


def weak_judgements(results: tuple[CaseResult, ...]) -> list[tuple[str, str, str]]:
    """(subject, tensor, dtype) of every tensor that met a tolerance a trivially wrong answer
    meets too (``TensorMetrics.weak``): judged, but its pass counted for nothing."""
    return [
        (r.case.subject, m.tensor, r.case.dtype) for r in results for m in r.metrics if m.passed and m.weak
    ]


def verdict_line(run: Run) -> str:
    """The one line a reviewer reads first: FAIL with the root causes nobody explained, PASS, or
    NOT RUN when no check ran at all (with each subject's reason)."""
    results = run.results
    prefix = "" if run.complete else "⚠️ **INCOMPLETE** · "
    if nothing_checked(results):
        reasons = idle_subjects(run)
        listed = "; ".join(f"**{s}**: {md.truncate(r, 300)}" for s, r in reasons.items())
        return f"{prefix}**⛔ NOT RUN: nothing was checked** — {listed or 'no check was planned'}."
    counts = verdict_counts(results)
    checked = [r for r in results if r.verdict in CHECKED]
    cases = len({(r.case.subject, r.case.case_id) for r in checked})
    subjects = {r.case.subject for r in checked}
    scope = f"{md.plural(cases, 'case')}, {md.plural(len(subjects), 'subject')}"
    extras = []
    if counts["known"]:
        extras.append(known_count_line(group_causes(r for r in results if r.verdict == "known")))
    if counts["flaky"]:
        extras.append(f"{counts['flaky']} flaky")
    if counts["unsupported"]:
        extras.append(f"{counts['unsupported']} unsupported")
    weak = weak_judgements(results)
    if weak:
        kinds = ", ".join(sorted({f"{subject} {tensor} ({dtype})" for subject, tensor, dtype in weak}))
        extras.append(f"⚠️ {md.plural(len(weak), 'tensor')} not judged: no answer could fail there ({kinds})")
    idle = idle_subjects(run)
    if idle:
        extras.append(f"not checked here: {', '.join(idle)} (see below)")
    tail = f"; {'; '.join(extras)}" if extras else ""
    if counts["failed"]:
        causes = group_causes(r for r in results if r.verdict in FAILED)
        failing_cases = len({(r.case.subject, r.case.case_id) for c in causes for r in c.results})
        errors = f", {counts['error']} of them errors" if counts["error"] else ""
        spread = (
            f"{md.plural(counts['failed'], 'failing check')} in {md.plural(failing_cases, 'case')}{errors}"
        )
        return (
            f"{prefix}**❌ FAIL** — {md.plural(len(causes), 'root cause')} not explained by the ledger "
            f"({spread}); "
            f"{md.plural(counts['pass'], 'check')} passed ({scope}){tail}."
        )
    if counts["known"]:
        return (
            f"{prefix}**✅ PASS (known issues only)** — no unexplained failure: "
            f"{md.plural(counts['pass'], 'check')} passed ({scope}){tail}."
        )
    return f"{prefix}**✅ PASS** — all {md.plural(counts['pass'], 'check')} that ran passed ({scope}){tail}."


def idle_subjects(run: Run) -> dict[str, str]:
    """Subjects none of whose checks ran, with why: from their records, and from summary.json for
    an unavailable subject that has none (a ``-k`` that selected none of its placeholders)."""
    idle = not_checked_reasons(run.results)
    recorded = {r.case.subject for r in run.results}
    for s in (run.summary or {}).get("subjects") or []:
        if (
            isinstance(s, dict)
            and s.get("name")
            and not s.get("available", True)
            and s["name"] not in recorded
        ):
            idle[str(s["name"])] = f"unavailable: {s.get('reason') or 'no reason given'}"
    return dict(sorted(idle.items()))


def incomplete_warning(run: Run) -> str:
    torn = " Its last line was cut mid-write and was dropped." if run.results_file.torn_last_line else ""
    return (
        "> [!WARNING]\n"
        f"> **Incomplete run.** `{RESULTS_FILE}` has no end record: the run was killed or crashed.{torn} "
        f"The {md.plural(len(run.results), 'result')} below are everything recorded before it stopped; "
        "cases after that never ran. Rerun with `--resume` to finish it."
    )


def grid_table(grid: Grid, unavailable: Iterable[str] = ()) -> str:
    """Subjects across, features down (grouped): a handful of subjects and a few dozen
    features stay narrow enough to read in a review without scrolling sideways."""
    header = ["feature", *[f"**{subject}**" for subject in grid.subjects]]

    def row(feature: str, name: str) -> list[str]:
        # An unavailable subject has no results that ran: say so on every row.
        return [
            name,
            *[
                md.STATUS_ICON["unavailable"] if subject in unavailable else grid_cell(grid, subject, feature)
                for subject in grid.subjects
            ],
        ]

    rows = [row("all", "**all checks**")]
    for group, features in grid.groups:
        rows.append([f"*{group}*", *[""] * len(grid.subjects)])
        rows += [row(feature, label(feature)) for feature in features]
    return md.table(header, rows, align="l" + "c" * len(grid.subjects))


def grid_cell(grid: Grid, subject: str, feature: str) -> str:
    cell = grid.cell(subject, feature)
    status = cell.status
    icon = md.STATUS_ICON[status]
    if status == "fail":
        return f"{icon} {cell.failed}/{cell.total}"
    if status == "known":
        return f"{icon} {cell.tally['known']}/{cell.total}"
    if status == "pass":
        return f"{icon} {cell.tally['pass']}"
    return icon


def environment_line(run: Run) -> str:
    env = run.environment
    line = one_line(env) if env else "environment unknown (no summary.json: the run did not finish)"
    settings = {**run.results_file.header, **(run.summary or {})}
    seed = settings.get("hypothesis_seed", settings.get("seed"))  # the suite's name, then the short one
    extras = [
        f"{name} {value}"
        for name, value in (("profile", settings.get("profile")), ("seed", seed))
        if value not in (None, "")
    ]
    return " · ".join([line, *extras])


def _own_reason(result: CaseResult) -> str:
    """The reason without the shrink note (the finding names its smaller cases once)."""
    reason = (result.reason or "").strip()
    if minimal_case_id(result):
        reason = "\n".join(
            line for line in reason.splitlines() if not line.startswith("Shrunk to a smaller failing case:")
        ).strip()
    return reason


def _worst_cell(cause: RootCause) -> str:
    """The worst element of a cause, with how far over its tolerance; else its worst reason."""
    worst = cause.worst
    metric = worst_metric(worst)
    if metric is not None:
        return f"{md.code(describe_worst_element(metric))} ({_over(worst)} its tolerance, {worst.check})"
    reason = _own_reason(worst)
    return md.truncate(reason.splitlines()[0], 140) if reason else worst.check


def _repro_cell(cause: RootCause) -> str:
    chosen = cause.repro_result
    return md.code(f"python {repro_path(chosen)}") if chosen is not None else "—"


def _cases_cell(cause: RootCause) -> str:
    cases, checks = len(cause.case_ids), len(cause.results)
    return f"{cases} ({md.plural(checks, 'check')})" if checks != cases else str(cases)


def causes_table(causes: list[RootCause], *, shown: int, listed: int = MAX_LISTED, link: str = "") -> str:
    """One row per root cause: what fails, how many cases, the smallest one, the worst element
    and one repro command. A cause past the first ``shown`` links into ``link`` (details.md)."""
    rows = []
    for number, cause in enumerate(causes[:listed], start=1):
        rows.append(
            [
                f"[{number}]({link}#cause-{number})" if link and number > shown else number,
                cause.subject,
                cause.summary(),
                _cases_cell(cause),
                md.code(cause.smallest.case.case_id),
                _worst_cell(cause),
                _repro_cell(cause),
            ]
        )
    text = md.table(["#", "subject", "failing", "cases", "smallest case", "worst element", "repro"], rows)
    if len(causes) > listed:
        where = DETAILS_LINK if link else f"`{RESULTS_FILE}`"
        text += f"\n\n… and {md.plural(len(causes) - listed, 'more root cause')} in {where}."
    return text


def cause_section(number: int, cause: RootCause, *, anchor: bool = False) -> str:
    """One root cause in full, folded: the worst case's reason, element and tensors, every case
    (one row per case template), and one repro script."""
    worst = cause.worst
    lines = []
    if worst.verdict == "error":
        lines += ["**Error** (the check or the subject crashed, not a numerical failure)", ""]
    lines += [
        f"**Worst case** ({worst.check}): {md.code(worst.case.case_id)}: {describe_case(worst.case)}.",
        "",
    ]
    reason = _own_reason(worst)
    if reason and "\n" in reason:  # tracebacks and per-tensor lines: keep their lines
        lines += ["**Reason:**", "", md.fenced(reason, "text"), ""]
    elif reason:
        lines += [f"**Reason:** {md.cell(reason)}", ""]
    metric = worst_metric(worst)
    if metric is not None:
        lines += [f"**Error vs tolerance:** {describe_tolerance(metric)}.", ""]
        lines += [_metrics_table(worst), ""]
    minimal = sorted({m for r in cause.results if (m := minimal_case_id(r))})
    if minimal:
        lines += [
            f"**Shrunk to:** {', '.join(md.code(i) for i in minimal)} (smaller cases failing the same way).",
            "",
        ]
    if len(cause.findings) > 1 or len(cause.results) > 1:
        lines += [
            f"**Its cases ({len(cause.case_ids)}), one row per case template:**",
            "",
            findings_rows(cause),
            "",
        ]
    chosen = cause.repro_result
    if chosen is not None:
        shrunk = minimal_case_id(chosen)
        standalone = chosen.repro.startswith('"""Standalone repro')
        which = (
            f"The {chosen.check} check of the smaller case {md.code(shrunk)}, shrunk from "
            f"{md.code(chosen.case.case_id)}"
            if shrunk and not standalone
            else f"The {chosen.check} check of {md.code(chosen.case.case_id)}"
            + (f" (it shrinks to {md.code(shrunk)})" if shrunk else "")
        )
        lines += [f"**Repro** (`{repro_path(chosen)}`, beside this report): {which}.", ""]
        lines.append(md.fenced(chosen.repro, "python"))
    else:
        lines.append("_No repro script was recorded for this cause._")
    title = f"{number}. {cause.subject} · {cause.summary()} · {md.plural(len(cause.case_ids), 'case')}"
    fold = md.details(html.escape(title), "\n".join(lines))
    return f'<a id="cause-{number}"></a>\n\n{fold}' if anchor else fold


def _metrics_table(result: CaseResult) -> str:
    rows = [
        [
            ("❌ " if not m.passed else "✅ ") + m.tensor,
            md.number(m.max_abs),
            md.number(m.tolerance),
            md.number(m.ratio),
            f"{m.k:g}",
            md.number(m.mean_ratio),
            f"{m.fraction_out_of_tolerance:.2%}",
        ]
        for m in result.metrics
    ]
    return md.table(
        ["tensor", "max-abs error", "tolerance", "ratio", "k", "mean ratio", "out of tol."],
        rows,
        align="lrrrrrr",
    )


def findings_rows(cause: RootCause) -> str:
    """A cause's case templates, one row each: its checks and dtypes, its worst error."""
    rows = []
    for group in cause.findings[:MAX_MEMBERS]:
        worst = group.worst
        metric = worst_metric(worst)
        rows.append(
            [
                md.code(group.label),
                group.summary(),
                f"{metric.tensor}: {_over(worst)}" if metric is not None else "—",
            ]
        )
    text = md.table(["case template", "failing", "worst error / tolerance"], rows, align="llr")
    if len(cause.findings) > MAX_MEMBERS:
        text += f"\n\n… and {len(cause.findings) - MAX_MEMBERS} more in `{RESULTS_FILE}`."
    return text


def _over(result: CaseResult) -> str:
    metric = worst_metric(result)
    return md.number(excess(metric)) + "×" if metric is not None and metric.tolerance > 0 else "—"


KNOWN_STATUS_ICON = {
    "reproduced": "🐞",
    "no longer reproduces": "🎉",
    "stale": "⚠️",
    "not run here": "·",
    "out of range": "↔️",
}


def _ledger_statuses(run: Run) -> list[dict]:
    """summary.json's ledger statuses; for a killed run (no summary), what the records say."""
    statuses = (run.summary or {}).get("known_issues")
    if isinstance(statuses, list):
        return [s for s in statuses if isinstance(s, dict)]
    known = [r for r in run.results if r.verdict == "known"]
    links: dict[str, str] = {}
    for r in known:
        links.setdefault(str(r.known_issue.get("id", "?")), str(r.known_issue.get("link", "")))
    return [{"id": i, "status": "reproduced", "link": link} for i, link in sorted(links.items())]


def known_issues_section(run: Run, *, cases: bool = True) -> str | None:
    """The ledger against this run, folded: one row per entry that concerns it (status, link, its
    cases, the smallest, the worst element, one repro), then each entry's cases in a fold of its
    own (``cases=False`` leaves those to details.md). Entries out of range that would explain
    nothing here are named in one line; entries that did not run here are counted."""
    statuses = _ledger_statuses(run)
    out_of_range = [s for s in statuses if _quiet_out_of_range(s)]
    shown = [s for s in statuses if s.get("status") != "not run here" and s not in out_of_range]
    if not shown and not out_of_range:
        return None
    causes = {c.entry: c for c in group_causes(r for r in run.results if r.verdict == "known")}
    rows = []
    for status in shown:
        cause = causes.get(str(status.get("id", "?")))
        state = f"{KNOWN_STATUS_ICON.get(status.get('status', ''), '')} {status.get('status', '')}"
        head = [state, md.code(status.get("id", "?")), _link(str(status.get("link", "")))]
        if cause is None:
            rows.append([*head, _unmatched(status), "", "", ""])
        else:
            rows.append(
                [
                    *head,
                    f"{_cases_cell(cause)}: {cause.summary()}",
                    md.code(cause.smallest.case.case_id),
                    _worst_cell(cause),
                    _repro_cell(cause),
                ]
            )
    files = ", ".join(md.code(f) for f in (run.summary or {}).get("ledger_files", [])) or "the ledger"
    body = [
        f"From {files}. A known failure keeps its full record in `{RESULTS_FILE}`; the gate still fails "
        "a check that passed in the base."
    ]
    if rows:
        header = ["status", "entry", "link", "cases", "smallest case", "worst element", "repro"]
        body += ["", md.table(header, rows)]
    if out_of_range:
        ranges = ", ".join(f"{md.code(s.get('id', '?'))} (jax {s.get('jax')})" for s in out_of_range)
        body += ["", f"Out of their range at this JAX version, matching no failure here: {ranges}."]
    hidden = len(statuses) - len(shown) - len(out_of_range)
    if hidden:
        body += [
            "",
            f"{md.plural(hidden, 'other entry', 'other entries')} concern subjects or cases not run here.",
        ]
    if causes and cases:
        for entry, cause in causes.items():
            title = f"{html.escape(str(entry))}: its {md.plural(len(cause.case_ids), 'case')}"
            body += ["", md.details(title, findings_rows(cause))]
    elif causes:
        body += ["", f"Each entry's cases: in {DETAILS_LINK}."]
    title = (
        f"🐞 Known issues: {known_count_line(list(causes.values()))}"
        if causes
        else "🐞 Known issues: none here"
    )
    return md.details(title, "\n".join(body))


def _quiet_out_of_range(status: dict) -> bool:
    """An entry outside its JAX range that would explain nothing here: named, not tabled."""
    return status.get("status") == "out of range" and not status.get("failing_outside_range")


def _unmatched(status: dict) -> str:
    """What an entry that matched nothing here says: out of range, no longer reproduces, stale."""
    if status.get("status") == "out of range":
        n = status.get("failing_outside_range", 0)
        return f"outside jax {status.get('jax')}" + (f"; ⚠️ would explain {n} failures here" if n else "")
    if status.get("status") == "no longer reproduces":
        return f"{status.get('passing', 0)} selected checks all pass: remove the entry?"
    return "—"


def ledger_warnings(run: Run) -> list[str]:
    """Entries a reviewer must act on, for the first screen: no longer reproducing, stale, or
    out of range while matching failures here."""
    lines = []
    for status in _ledger_statuses(run):
        state, entry = status.get("status"), md.code(status.get("id", "?"))
        if state == "no longer reproduces":
            lines.append(
                f"⚠️ Ledger entry {entry} no longer reproduces: every check it selects passes; remove it?"
            )
        elif state == "stale":
            lines.append(
                f"⚠️ Ledger entry {entry} is stale: it selects nothing in this run; fix its selector."
            )
        elif state == "out of range" and status.get("failing_outside_range"):
            lines.append(
                f"⚠️ Ledger entry {entry} would explain {status['failing_outside_range']} failures here, "
                f"outside its range jax {status.get('jax')}"
                + (f", tokamax {status['tokamax']}" if status.get("tokamax") else "")
                + "; widen it if they are the same defect."
            )
    return lines


def _link(link: str) -> str:
    """A GitHub issue or pull request as ``owner/repo#N``; any other address as a link; prose as is."""
    found = _GITHUB_THREAD.match(link)
    if found:
        return f"[{found['repo']}#{found['number']}]({link})"
    return f"[link]({link})" if link.startswith("http") else md.cell(link)


_GITHUB_THREAD = re.compile(r"^https://github\.com/(?P<repo>[^/]+/[^/]+)/(?:issues|pull)/(?P<number>\d+)")


def observed_section(results: Iterable[CaseResult]) -> str | None:
    """Behaviour the semantics leave open (docs/semantics.md), as observed per subject: what a fully
    masked row returns, its lse, what masked NaN does. A change between releases shows in the gate."""
    seen: dict[tuple[str, str], Counter] = {}
    for result in results:
        for what, value in result.observed.items():
            seen.setdefault((result.case.subject, what), Counter())[value] += 1
    if not seen:
        return None
    rows = [
        [
            subject,
            OBSERVED_LABELS.get(what, what),
            ", ".join(f"{md.code(v)} ×{n}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1])),
        ]
        for (subject, what), counts in sorted(seen.items())
    ]
    return md.table(["subject", "what", "observed (checks)"], rows)


OBSERVED_LABELS = {
    "fully_masked_out": "out of a fully masked row",
    "fully_masked_lse": "lse of a fully masked row",
    "masked_nonfinite": "NaN in masked-out inputs",
}


def flaky_section(results: Iterable[CaseResult]) -> str | None:
    """Checks whose worker crashed once but which ran normally when retried alone: not failures,
    but listed, so a crash that keeps coming back in other cases or runs gets noticed."""
    flaky = sorted(
        (r for r in results if r.verdict == "flaky"), key=lambda r: (r.case.subject, r.check, r.case.case_id)
    )
    if not flaky:
        return None
    rows = [
        [
            r.case.subject,
            r.check,
            md.code(r.case.case_id),
            r.details.get("first_attempt") or r.reason.partition("\n")[0],
            r.details.get("retry", "—"),
        ]
        for r in flaky
    ]
    intro = (
        f"{md.plural(len(flaky), 'check')} crashed or timed out once, then ran normally when rerun alone "
        "in a fresh process: not counted as failures (a crash that happens again is an error)."
    )
    table = md.table(["subject", "check", "case", "first attempt", "retry in a fresh process"], rows)
    return "\n".join([intro, "", table])


def unique_clauses(text: str) -> str:
    """``text`` with each '; '-separated clause once (clauses inside brackets stay whole): a
    constraint that two directions violate is one reason, not two."""
    clauses, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0 and text.startswith("; ", i):
            clauses.append(text[start:i])
            start = i + 2
    clauses.append(text[start:])
    return "; ".join(dict.fromkeys(c for c in clauses if c))


def unsupported_summary(results: tuple[CaseResult, ...]) -> str | None:
    """Unsupported checks per subject and reason, folded; the subject named once per group."""
    reasons = Counter(
        (r.case.subject, unique_clauses(r.reason or "no reason given"))
        for r in results
        if r.verdict == "unsupported"
    )
    if not reasons:
        return None
    rows, previous = [], None
    for (subject, reason), n in sorted(reasons.items()):
        rows.append([f"**{subject}**" if subject != previous else "", reason, n])
        previous = subject
    table = md.table(
        ["subject", "reason (from the subject's declared capabilities)", "checks"], rows, align="llr"
    )
    title = (
        f"➖ Unsupported: {md.plural(sum(reasons.values()), 'check')} for {md.plural(len(reasons), 'reason')}"
    )
    return md.details(title, table)


def subject_lines(run: Run) -> list[str]:
    """One line per subject: what passed, failed, is known, unsupported or unavailable, and how
    it ran; a subject none of whose checks ran says why. Under it, why the checks that were
    unavailable to it did not run, and each distinct warning it raised."""
    by_subject: dict[str, list[CaseResult]] = {}
    for result in run.results:
        by_subject.setdefault(result.case.subject, []).append(result)
    executions = _executions(run)
    idle = idle_subjects(run)
    warned = run.subject_warnings()
    for subject in idle:
        by_subject.setdefault(subject, [])
    lines = []
    for subject, mine in sorted(by_subject.items()):
        if subject in idle:
            icon = md.STATUS_ICON["unavailable"] if idle[subject].startswith("unavailable") else "⛔"
            lines.append(f"- {icon} **{subject}** — not checked: {md.cell(idle[subject])}")
            lines += warning_lines(warned.get(subject, ()))
            continue
        counts = verdict_counts(tuple(mine))
        parts = [f"{counts['pass']} passed"]
        if counts["failed"]:
            causes = group_causes(r for r in mine if r.verdict in FAILED)
            parts.insert(0, f"{counts['failed']} failing ({md.plural(len(causes), 'root cause')})")
        if counts["known"]:
            known = group_causes(r for r in mine if r.verdict == "known")
            parts.append(f"🐞 {counts['known']} known ({md.plural(len(known), 'issue')})")
        for verdict in ("flaky", "unsupported", "unavailable"):
            if counts[verdict]:
                parts.append(f"{md.STATUS_ICON[verdict]} {counts[verdict]} {verdict}")
        if executions.get(subject):
            parts.append(md.cell(executions[subject]))
        icon = md.STATUS_ICON["fail" if counts["failed"] else "pass"]
        lines.append(f"- {icon} **{subject}** — {' · '.join(parts)}")
        contradicted = sorted({r.check for r in mine if r.details.get(UNDECLARED_JAX_RUNTIME)})
        if contradicted:
            lines.append(
                f"  - ⚠️ declares no JAX runtime (`Capabilities.jax_runtime` unset), yet JAX compiled during "
                f"its calls: the declaration contradicts what was observed; {', '.join(contradicted)} ran "
                "their JAX-side parts anyway. Set `jax_runtime=True`."
            )
        # Partly unavailable (it only lowers here, say): why the rest did not run, once per reason.
        for reason in dict.fromkeys(
            r.reason or "no reason given" for r in mine if r.verdict == "unavailable"
        ):
            lines.append(f"  - {md.STATUS_ICON['unavailable']} unavailable: {md.truncate(reason, 300)}")
        lines += warning_lines(warned.get(subject, ()))
    return lines


def warning_lines(warnings: Iterable[str]) -> list[str]:
    """A subject's warnings under its line, one each (``"DeprecationWarning: ..."``, as recorded)."""
    return [f"  - ⚠️ {html.escape(md.truncate(w, 300), quote=False)}" for w in warnings]


def _executions(run: Run) -> dict[str, str]:
    """How each subject ran, from summary.json's subjects block (``execution_detail``, else ``execution``)."""
    subjects = (run.summary or {}).get("subjects")
    if not isinstance(subjects, list):
        return {}
    return {
        s["name"]: str(s.get("execution_detail") or s.get("execution") or "native")
        for s in subjects
        if isinstance(s, dict) and s.get("name") and s.get("available", True)
    }


def display_path(folder: Path) -> str:
    """The folder relative to the working directory when it is inside it, never naming a home path.

    A home folder that lies *inside* the working directory (as in a CI checkout with a
    throwaway HOME) would otherwise show up in the relative path, so it becomes ``~``.
    """
    folder, cwd, home = folder.resolve(), Path.cwd().resolve(), Path.home().resolve()
    if folder.is_relative_to(home) and not cwd.is_relative_to(home):
        return str(Path("~") / folder.relative_to(home))
    if folder.is_relative_to(cwd):
        return str(folder.relative_to(cwd))
    return folder.name


def render_markdown(run: Run, *, plot_note: str | None = None, max_details: int = MAX_DETAILS) -> str:
    """The whole report.md for one run (pure: no files touched)."""
    return render(run, plot_note=plot_note, max_details=max_details).report


def render(
    run: Run, *, plot_note: str | None = None, max_details: int = MAX_DETAILS, max_chars: int = BUDGET_CHARS
) -> Rendered:
    """report.md and, when it cannot hold every root cause in full within ``max_chars``, details.md
    (pure: no files touched).

    report.md opens with what a reviewer needs: the verdict, the root causes nobody explained (one
    row each), one line per subject; everything else is folded. When that does not fit, the causes
    past the first ones keep only their row (linking into details.md), then the folds after them
    shrink to links, then the table to its first rows; details.md holds everything."""
    causes = group_causes(r for r in run.results if r.verdict in FAILED)
    top, footer = _top(run), _footer(run)
    subjects = [*subject_lines(run), *ledger_warnings(run)]
    full = [cause_section(n, c) for n, c in enumerate(causes, start=1)]
    whole = _assemble(top, causes, full, len(causes), subjects, _folds(run, plot_note, short=False), footer)
    if len(causes) <= max_details and len(whole) <= max_chars:
        return Rendered(whole, None)
    anchored = [cause_section(n, c, anchor=True) for n, c in enumerate(causes, start=1)]
    details = _assemble(
        _details_top(run), causes, anchored, len(causes), subjects, _folds(run, None, short=False), footer
    )
    note = (
        f"📄 **Every root cause in full, with its repro script: {DETAILS_LINK}** (beside this file; "
        f"report.md stays within {max_chars:,} characters, well inside what a review comment holds)."
    )
    for short in (False, True):
        folds = _folds(run, plot_note, short=short)
        for listed in (MAX_LISTED, 100, 50, 20, 0):
            for shown in range(min(max_details, len(causes)), -1, -1):
                text = _assemble(top, causes, full, shown, subjects, folds, footer, listed=listed, note=note)
                if len(text) <= max_chars:
                    return Rendered(text, details)
    return Rendered(_clip(text, max_chars), details)  # the summary alone is too long (thousands of subjects)


def _top(run: Run) -> list[str]:
    """Title, incomplete warning, verdict, environment."""
    parts = [f"# Conformance report · jax {run.versions}", ""]  # "0.10.2 + tokamax 0.0.12" where it ran
    if not run.complete:
        parts += [incomplete_warning(run), ""]
    return parts + [verdict_line(run), "", environment_line(run), ""]


def _details_top(run: Run) -> list[str]:
    return [
        f"# Conformance report · jax {run.versions} · every root cause in full",
        "",
        f"The details of [{REPORT_FILE}]({REPORT_FILE}).",
        "",
        verdict_line(run),
        "",
        environment_line(run),
        "",
    ]


def _folds(run: Run, plot_note: str | None, *, short: bool) -> list[str]:
    """What follows the first screen, each part folded; ``short`` leaves the long ones to details.md."""
    results = run.results
    grid = feature_grid(results)
    sections = [
        known_issues_section(run, cases=not short),
        md.details(
            "Grid: subjects × features", grid_table(grid, unavailable_subjects(results)) + "\n\n" + md.LEGEND
        )
        if grid.subjects
        else None,
        unsupported_summary(results),
        _folded(fidelity_section(results), "What holds on hardware (interpreter verdicts vs lowered)"),
        _folded(flaky_section(results), "🎲 Flaky checks (crashed once, then ran normally)"),
        _folded(observed_section(results), "Observed behaviour where the semantics are open"),
        _folded(pairwise_section(run.summary), "Pairwise coverage of optional inputs"),
        _folded(
            precision_section(results),
            "Precision grade: error ratio to the baseline, per subject, dtype, tensor",
        ),
        plot_note,
    ]
    if short:
        flaky = sum(r.verdict == "flaky" for r in results)
        sections[4] = f"🎲 {md.plural(flaky, 'flaky check')}: in {DETAILS_LINK}." if flaky else None
        sections[5] = (
            f"Observed behaviour where the semantics are open: in {DETAILS_LINK}." if sections[5] else None
        )
    return [part for section in sections if section for part in (section, "")]


PRECISION_TITLE = "Precision grade: error ratio to the baseline, per subject, dtype and tensor"


def _folded(section: str | None, title: str) -> str | None:
    return None if section is None else md.details(title, section)


def _footer(run: Run) -> str:
    schema = run.results_file.header.get("schema", "?")
    return (
        f"<sub>From `{RESULTS_FILE}` (schema {schema}) · render again with "
        f"`python -m reports render {display_path(run.folder)}`</sub>"
    )


def _assemble(
    top: list[str],
    causes: list[RootCause],
    entries: list[str],
    shown: int,
    subjects: list[str],
    folds: list[str],
    footer: str,
    *,
    listed: int = MAX_LISTED,
    note: str = "",
) -> str:
    """The report: ``top``, the causes' table, the subject lines, the first ``shown`` causes in
    full (folded), then the folds. ``note`` (the link to details.md) goes above the table, whose
    rows past ``shown`` then link into details.md."""
    parts = list(top)
    if causes:
        parts += [f"## ❌ Not explained by the ledger: {cause_count_line(causes)}", ""]
        if note:
            parts += [note, ""]
        parts += [causes_table(causes, shown=shown, listed=listed, link=DETAILS_FILE if note else ""), ""]
    parts += [*subjects, ""]
    for entry in entries[:shown]:
        parts += [entry, ""]
    parts += folds
    parts.append(footer)
    return "\n".join(parts).rstrip() + "\n"


def _clip(text: str, limit: int) -> str:
    """The first lines of ``text`` that fit in ``limit`` characters, and a line saying where the rest is."""
    note = f"\n\n… cut here to stay within {limit:,} characters: the whole report is in {DETAILS_LINK}.\n"
    kept = text[: max(0, limit - len(note))]
    return kept[: kept.rfind("\n") + 1].rstrip() + note

"""report.md: one run, for a code review.

A passing run fits one screen: verdict line, environment line, subject x feature
grid. Failures follow grouped by cause (``reports.grouping``): one finding per case
template, across checks and dtypes, with its worst tensor and one standalone repro
script. A run without its end record is marked incomplete at the very top.

report.md always fits a GitHub review comment (``MAX_CHARS``). When it cannot show
every finding in full, the findings past the first ones are listed in a table and
``details.md`` beside it holds the whole report, every finding in full.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from reports import markdown as md
from reports.describe import describe_case, describe_tolerance, describe_worst_element, excess, worst_metric
from reports.environment import one_line
from reports.fidelity import fidelity_section
from reports.grid import FAILED, Grid, feature_grid, label, unavailable_subjects
from reports.grouping import FailureGroup, count_line, group_failures, minimal_case_id
from reports.pairwise import pairwise_section
from reports.plots import RUN_PLOT, plot_run
from reports.records import RESULTS_FILE, CaseResult, write_text_atomic
from reports.run import Run, load_run

REPORT_FILE = "report.md"
REPRO_DIR = "repro"  # repro/<check>/<case id>.py: each recorded repro script, beside report.md
DETAILS_FILE = "details.md"  # the whole report, every finding in full, when report.md is abridged
DETAILS_LINK = f"[{DETAILS_FILE}]({DETAILS_FILE})"
MAX_CHARS = 65_536  # the most characters GitHub accepts in a review comment
MAX_DETAILS = 20  # findings shown in full in report.md; the rest are listed in a table
MAX_LISTED = 200  # rows of that table; the rest are counted (and in details.md)
MAX_MEMBERS = 24  # rows of one finding's table of failing checks
MAX_CASE_IDS = 6  # case ids named in one finding's header


@dataclasses.dataclass(frozen=True)
class Rendered:
    report: str  # report.md, at most MAX_CHARS characters
    details: str | None  # details.md: the unabridged report; None when report.md holds everything


def write_report(
    report_dir: Path, *, plots: bool = True, max_details: int = MAX_DETAILS, max_chars: int = MAX_CHARS
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
        write_text_atomic(path, text)
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


def verdict_line(run: Run) -> str:
    results = run.results
    counts = verdict_counts(results)
    cases = len({(r.case.subject, r.case.case_id) for r in results})
    subjects = sorted({r.case.subject for r in results})
    unavailable = unavailable_subjects(results)
    prefix = "" if run.complete else "⚠️ **INCOMPLETE** · "
    extras = []
    if counts["known"]:
        known = [r for r in results if r.verdict == "known"]
        ids = sorted({r.known_issue.get("id", "?") for r in known})
        findings = md.plural(len(group_failures(known)), "finding")
        extras.append(
            f"{counts['known']} failing as known issues in {findings} ({', '.join(ids)}; see Known issues)"
        )
    if counts["unsupported"]:
        extras.append(f"{counts['unsupported']} unsupported (skipped with the subject's reason)")
    if unavailable:
        extras.append(f"{md.plural(len(unavailable), 'subject')} unavailable here ({', '.join(unavailable)})")
    tail = f"; {'; '.join(extras)}" if extras else ""
    scope = f"{md.plural(cases, 'case')}, {md.plural(len(subjects), 'subject')}"
    if counts["failed"]:
        failing = sorted({r.case.subject for r in results if r.verdict in FAILED})
        errors = f", {counts['error']} of them errors" if counts["error"] else ""
        findings = md.plural(len(group_failures(r for r in results if r.verdict in FAILED)), "finding")
        return (
            f"{prefix}**❌ FAIL** — {counts['failed']} of {md.plural(len(results), 'check')} failed{errors} "
            f"({findings}; {scope}; failing: {', '.join(failing)}){tail}."
        )
    if counts["known"]:
        return (
            f"{prefix}**✅ PASS (known issues only)** — no unexplained failure: "
            f"{md.plural(counts['pass'], 'check')} passed ({scope}){tail}."
        )
    if counts["pass"]:
        return (
            f"{prefix}**✅ PASS** — all {md.plural(counts['pass'], 'check')} that ran passed ({scope}){tail}."
        )
    return f"{prefix}**⚠️ NOTHING RAN** — no check passed or failed ({scope}){tail}."


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


def execution_line(run: Run) -> str | None:
    """How each subject ran (e.g. interpret mode on CPU), from summary.json's subjects block:
    the sentence (``execution_detail``), else ``execution`` (the literal; the sentence in older runs)."""
    subjects = (run.summary or {}).get("subjects")
    if not isinstance(subjects, list):
        return None
    parts = [
        f"{s['name']}: {s.get('execution_detail') or s.get('execution') or 'native'}"
        for s in subjects
        if isinstance(s, dict) and s.get("name") and s.get("available", True)
    ]
    return f"Execution · {' · '.join(parts)}" if parts else None


def finding_section(number: int, group: FailureGroup, *, anchor: bool = False) -> str:
    """One finding in full: what fails where, the worst member's case, worst element and
    tensors, every failing check in a table, and one repro script."""
    worst = group.worst
    heading = f"### {number}. ❌ {group.subject} · {group.summary()} · {md.code(group.label)}"
    lines = [f'<a id="finding-{number}"></a>', "", heading, ""] if anchor else [heading, ""]
    if worst.verdict == "error":
        lines += ["**Error** (the check or the subject crashed, not a numerical failure)", ""]
    ids = group.case_ids
    named = ", ".join(md.code(i) for i in ids[:MAX_CASE_IDS])
    more = f" and {len(ids) - MAX_CASE_IDS} more" if len(ids) > MAX_CASE_IDS else ""
    lines += [f"**{'Cases' if len(ids) > 1 else 'Case id'}:** {named}{more}.", ""]
    minimal = group.minimal_case_ids
    if minimal:
        lines += [
            f"**Shrunk to:** {', '.join(md.code(i) for i in minimal)} (smaller cases failing the same way).",
            "",
        ]
    worst_of = f" (worst: {worst.check} in {worst.case.dtype})" if len(group.results) > 1 else ""
    lines += [f"**Case{worst_of}:** {describe_case(worst.case)}.", ""]
    reason = _own_reason(worst)
    if reason and "\n" in reason:  # tracebacks: keep their lines
        lines += ["**Reason:**", "", md.fenced(reason, "text"), ""]
    elif reason:
        lines += [f"**Reason:** {md.cell(reason)}", ""]
    metric = worst_metric(worst)
    if metric is not None:
        lines += [f"**Worst element:** {md.code(describe_worst_element(metric))}", ""]
        lines += [f"**Error vs tolerance:** {describe_tolerance(metric)}.", ""]
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
            for m in worst.metrics
        ]
        lines += [
            md.table(
                ["tensor", "max-abs error", "tolerance", "ratio", "k", "mean ratio", "out of tol."],
                rows,
                align="lrrrrrr",
            ),
            "",
        ]
    if len(group.results) > 1:
        lines += [f"**Failing checks ({len(group.results)}):**", "", members_table(group), ""]
    chosen = group.repro_result
    if chosen is not None:
        shrunk = minimal_case_id(chosen)
        # A standalone script reproduces the recorded case (whose tolerance it embeds); the
        # checkout script, the smaller case it shrank to.
        standalone = chosen.repro.startswith('"""Standalone repro')
        which = (
            f"The {chosen.check} check of the smaller case {md.code(shrunk)}, "
            f"shrunk from {md.code(chosen.case.case_id)}:"
            if shrunk and not standalone
            else f"The {chosen.check} check of {md.code(chosen.case.case_id)}"
            + (f" (it shrinks to {md.code(shrunk)}):" if shrunk else ":")
        )
        body = which + "\n\n" + md.fenced(chosen.repro, "python")
        title = f"Repro script (<code>{repro_path(chosen)}</code>, beside this report)"
        lines.append(md.details(title, body))
    else:
        lines.append("_No repro script was recorded for this case._")
    return "\n".join(lines)


def _own_reason(result: CaseResult) -> str:
    """The reason without the shrink note (the finding names its smaller cases once)."""
    reason = (result.reason or "").strip()
    if minimal_case_id(result):
        reason = "\n".join(
            line for line in reason.splitlines() if not line.startswith("Shrunk to a smaller failing case:")
        ).strip()
    return reason


def members_table(group: FailureGroup) -> str:
    rows = []
    for result in group.results[:MAX_MEMBERS]:
        metric = worst_metric(result)
        rows.append(
            [
                result.check,
                result.case.dtype,
                md.code(result.case.case_id),
                f"{md.STATUS_ICON['fail']} {result.verdict}",
                metric.tensor if metric else "—",
                _over(result),
                md.truncate(_own_reason(result).splitlines()[0] if _own_reason(result) else "", 100),
            ]
        )
    text = md.table(
        ["check", "dtype", "case", "verdict", "worst", "error / tolerance", "reason"], rows, align="lllllrl"
    )
    if len(group.results) > MAX_MEMBERS:
        text += f"\n\n… and {len(group.results) - MAX_MEMBERS} more in `{RESULTS_FILE}`."
    return text


def _over(result: CaseResult) -> str:
    metric = worst_metric(result)
    return md.number(excess(metric)) + "×" if metric is not None and metric.tolerance > 0 else "—"


def findings_table(
    groups: list[FailureGroup], first: int, *, listed: int = MAX_LISTED, link: str = ""
) -> str:
    """The findings numbered ``first`` on, one row each; ``link`` (details.md) numbers link to
    their full entries there."""
    rows = []
    for number, group in enumerate(groups[:listed], start=first):
        worst = group.worst
        metric = worst_metric(worst)
        reason = _own_reason(worst)
        rows.append(
            [
                f"[{number}]({link}#finding-{number})" if link else number,
                group.subject,
                group.summary(),
                md.code(group.label),
                f"{metric.tensor} ({worst.check}, {worst.case.dtype})" if metric else worst.check,
                _over(worst),
                md.truncate(reason.splitlines()[0], 120) if reason else "",
            ]
        )
    text = md.table(
        ["#", "subject", "failing", "case", "worst", "error / tolerance", "reason"], rows, align="rlllcrl"
    )
    if len(groups) > listed:
        where = DETAILS_LINK if link else f"`{RESULTS_FILE}`"
        text += f"\n\n… and {md.plural(len(groups) - listed, 'more finding')} in {where}."
    return text


KNOWN_STATUS_ICON = {
    "reproduced": "🐞",
    "no longer reproduces": "🎉",
    "stale": "⚠️",
    "not run here": "·",
    "out of range": "↔️",
}


def known_issues_section(run: Run, *, findings: bool = True) -> str | None:
    """The ledger against this run: each entry's status, link, matched checks and one worst element,
    then the known failures grouped into findings like the unexplained ones (``findings=False``
    leaves that table to details.md). Entries that did not run here are folded away."""
    statuses = (run.summary or {}).get("known_issues")
    known = [r for r in run.results if r.verdict == "known"]
    if not isinstance(statuses, list):  # a killed run has no summary: list what the records say
        ids = sorted({r.known_issue.get("id", "?") for r in known})
        statuses = [
            {
                "id": i,
                "status": "reproduced",
                "link": next(r.known_issue.get("link", "") for r in known if r.known_issue.get("id") == i),
            }
            for i in ids
        ]
    shown = [s for s in statuses if isinstance(s, dict) and s.get("status") != "not run here"]
    if not shown:
        return None
    rows = []
    for status in shown:
        mine = [r for r in known if r.known_issue.get("id") == status.get("id")]
        rows.append(
            [
                f"{KNOWN_STATUS_ICON.get(status.get('status', ''), '')} {status.get('status', '')}",
                md.code(status.get("id", "?")),
                _link(status.get("link", "")),
                _matched(mine, status),
                _worst(mine),
            ]
        )
    hidden = len(statuses) - len(shown)
    note = (
        (
            f"\n\n{md.plural(hidden, 'other entry', 'other entries')} of the ledger concern subjects or "
            "cases not run here."
        )
        if hidden
        else ""
    )
    files = ", ".join(md.code(f) for f in (run.summary or {}).get("ledger_files", [])) or "the ledger"
    groups = group_failures(known)
    text = (
        f"## Known issues: {count_line(groups)} explained\n\nFrom {files}. A known failure keeps "
        "its full record in `results.jsonl`; the gate still fails a check that passed in the base.\n\n"
        + md.table(["status", "entry", "link", "matched checks", "worst element"], rows)
        + note
    )
    if groups and findings:
        text += "\n\n**By finding** (grouped like the failures above):\n\n" + known_findings_table(groups)
    elif groups:
        text += f"\n\nThe {md.plural(len(groups), 'known finding')}, one by one: in {DETAILS_LINK}."
    return text


def known_findings_table(groups: list[FailureGroup]) -> str:
    """Known failures grouped by cause, like the unexplained ones: one row per finding."""
    rows = []
    for group in groups[:MAX_LISTED]:
        entries = sorted({r.known_issue.get("id", "?") for r in group.results})
        metric = worst_metric(group.worst)
        rows.append(
            [
                ", ".join(md.code(e) for e in entries),
                group.subject,
                group.summary(),
                md.code(group.label),
                md.code(describe_worst_element(metric))
                if metric
                else md.truncate(_own_reason(group.worst), 120),
            ]
        )
    text = md.table(["entry", "subject", "failing", "case", "worst element"], rows)
    if len(groups) > MAX_LISTED:
        text += f"\n\n… and {md.plural(len(groups) - MAX_LISTED, 'more finding')} in `{RESULTS_FILE}`."
    return text


def _link(link: str) -> str:
    """A GitHub issue or pull request as ``owner/repo#N``; any other address as a link; prose as is."""
    found = _GITHUB_THREAD.match(link)
    if found:
        return f"[{found['repo']}#{found['number']}]({link})"
    return f"[link]({link})" if link.startswith("http") else md.cell(link)


_GITHUB_THREAD = re.compile(r"^https://github\.com/(?P<repo>[^/]+/[^/]+)/(?:issues|pull)/(?P<number>\d+)")


def _matched(results: list[CaseResult], status: dict) -> str:
    if status.get("status") == "out of range":
        n = status.get("failing_outside_range", 0)
        return f"outside jax {status.get('jax')}" + (f"; ⚠️ would explain {n} failures here" if n else "")
    if status.get("status") == "no longer reproduces":
        return f"{status.get('passing', 0)} selected checks all pass: remove the entry?"
    if not results:
        return "—"
    checks = Counter(r.check for r in results)
    dtypes = sorted({r.case.dtype for r in results})
    return (
        f"{count_line(group_failures(results), 'check')}: "
        + ", ".join(f"{c} ×{n}" for c, n in sorted(checks.items()))
        + f" ({', '.join(dtypes)})"
    )


def _worst(results: list[CaseResult]) -> str:
    metrics = [(m, r) for r in results for m in ([worst_metric(r)] if worst_metric(r) else [])]
    if metrics:
        metric, result = max(
            metrics,
            key=lambda mr: (
                mr[0].max_abs / mr[0].tolerance
                if mr[0].tolerance > 0 and mr[0].max_abs == mr[0].max_abs
                else float("inf")
            ),
        )
        return f"{md.code(describe_worst_element(metric))} in {md.code(result.case.case_id)}"
    for result in results:
        if result.reason.strip():
            return md.truncate(result.reason.strip().splitlines()[0])
    return "—"


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
    return "## Observed behaviour where the semantics are open\n\n" + md.table(
        ["subject", "what", "observed (checks)"], rows
    )


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
    return "\n".join(["## Flaky (crashed once, then ran normally)", "", intro, "", table])


def unsupported_summary(results: tuple[CaseResult, ...]) -> str | None:
    reasons = Counter(
        (r.case.subject, r.reason or "no reason given") for r in results if r.verdict == "unsupported"
    )
    if not reasons:
        return None
    rows = [[subject, reason, n] for (subject, reason), n in sorted(reasons.items())]
    table = md.table(
        ["subject", "reason (from the subject's declared capabilities)", "checks"], rows, align="llr"
    )
    return md.details(f"Unsupported combinations ({sum(reasons.values())})", table)


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
    run: Run, *, plot_note: str | None = None, max_details: int = MAX_DETAILS, max_chars: int = MAX_CHARS
) -> Rendered:
    """report.md and, when it cannot hold every finding in full within ``max_chars``, details.md
    (pure: no files touched).

    report.md keeps the one-screen summary at the top, then as many findings in full as fit
    (at most ``max_details``) and the rest as table rows that link into details.md; if even the
    table does not fit, the sections after it shrink to links, then the table to its first rows."""
    groups = group_failures(r for r in run.results if r.verdict in FAILED)
    top, footer = _top(run, plot_note), _footer(run)
    full_entries = [finding_section(n, g) for n, g in enumerate(groups, start=1)]
    whole = _assemble(top, groups, full_entries, len(groups), _tail(run, short=False), footer)
    if len(groups) <= max_details and len(whole) <= max_chars:
        return Rendered(whole, None)
    anchored = [finding_section(n, g, anchor=True) for n, g in enumerate(groups, start=1)]
    details = _assemble(_details_top(run), groups, anchored, len(groups), _tail(run, short=False), footer)
    note = (
        f"📄 **Every finding in full, with its repro script: {DETAILS_LINK}** (beside this file; "
        f"report.md stays within {max_chars:,} characters, what a review comment holds)."
    )
    for short in (False, True):
        tail = _tail(run, short=short)
        for listed in (MAX_LISTED, 100, 50, 20, 0):
            for shown in range(min(max_details, len(groups)), -1, -1):
                text = _assemble(top, groups, full_entries, shown, tail, footer, listed=listed, note=note)
                if len(text) <= max_chars:
                    return Rendered(text, details)
    return Rendered(_clip(text, max_chars), details)  # the summary alone is too long (thousands of subjects)


def _top(run: Run, plot_note: str | None) -> list[str]:
    """The one-screen summary: title, incomplete warning, verdict, environment, grid."""
    results = run.results
    parts = [f"# Conformance report · jax {run.jax_version}", ""]
    if not run.complete:
        parts += [incomplete_warning(run), ""]
    parts += [verdict_line(run), "", environment_line(run), ""]
    grid = feature_grid(results)
    unavailable = unavailable_subjects(results)
    if grid.subjects:
        parts += [grid_table(grid, unavailable), "", md.LEGEND, ""]
    execution = execution_line(run)
    if execution:
        parts += [execution, ""]
    fidelity = fidelity_section(results)
    if fidelity:
        parts += [fidelity, ""]
    for subject, reason in unavailable.items():
        parts += [f"🚫 **{subject}** is unavailable here: {md.cell(reason) or 'no reason given'}", ""]
    if plot_note:
        parts += [plot_note, ""]
    return parts


def _details_top(run: Run) -> list[str]:
    return [
        f"# Conformance report · jax {run.jax_version} · every finding in full",
        "",
        f"The details of [{REPORT_FILE}]({REPORT_FILE}) (the summary, grid and plot are there).",
        "",
        verdict_line(run),
        "",
        environment_line(run),
        "",
    ]


def _tail(run: Run, *, short: bool) -> list[str]:
    """The sections after the findings; ``short`` leaves the long ones to details.md."""
    results = run.results
    sections = [
        flaky_section(results),
        unsupported_summary(results),
        known_issues_section(run, findings=not short),
        observed_section(results),
        pairwise_section(run.summary),
    ]
    if short:
        flaky = sum(r.verdict == "flaky" for r in results)
        sections[0] = (
            f"🎲 {md.plural(flaky, 'flaky check')} (crashed once, then ran normally): in {DETAILS_LINK}."
            if flaky
            else None
        )
        sections[3] = (
            f"Observed behaviour where the semantics are open: in {DETAILS_LINK}." if sections[3] else None
        )
    return [part for section in sections if section for part in (section, "")]


def _footer(run: Run) -> str:
    schema = run.results_file.header.get("schema", "?")
    return (
        f"<sub>From `{RESULTS_FILE}` (schema {schema}) · render again with "
        f"`python -m reports render {display_path(run.folder)}`</sub>"
    )


def _assemble(
    top: list[str],
    groups: list[FailureGroup],
    entries: list[str],
    shown: int,
    tail: list[str],
    footer: str,
    *,
    listed: int = MAX_LISTED,
    note: str = "",
) -> str:
    """The report with the first ``shown`` findings in full and the rest in a table; ``note``
    (the link to details.md) goes above the findings, and makes the table's numbers links."""
    parts = list(top)
    if groups:
        parts += [f"## Failures: {count_line(groups)}", ""]
        parts += [
            "One finding per case template (the same subject, shape, masks and options, whatever the "
            "check and dtype); cases shrunk to the same smaller case are one finding.",
            "",
        ]
        if note:
            parts += [note, ""]
        for entry in entries[:shown]:
            parts += [entry, ""]
        if shown < len(groups):
            rest = groups[shown:]
            parts += [
                f"### Further findings ({len(rest)})",
                "",
                findings_table(rest, shown + 1, listed=listed, link=DETAILS_FILE if note else ""),
                "",
            ]
    parts += tail
    parts.append(footer)
    return "\n".join(parts).rstrip() + "\n"


def _clip(text: str, limit: int) -> str:
    """The first lines of ``text`` that fit in ``limit`` characters, and a line saying where the rest is."""
    note = f"\n\n… cut here to stay within {limit:,} characters: the whole report is in {DETAILS_LINK}.\n"
    kept = text[: max(0, limit - len(note))]
    return kept[: kept.rfind("\n") + 1].rstrip() + note

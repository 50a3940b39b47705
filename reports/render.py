"""report.md: one run, for a code review.

A passing run fits one screen: verdict line, environment line, subject x feature
grid. Each failure follows with the case in words, its worst element, its error
against the tolerance and a standalone repro script. A run without its end record
is marked incomplete at the very top.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from reports import markdown as md
from reports.describe import describe_case, describe_tolerance, describe_worst_element, worst_metric
from reports.environment import one_line
from reports.grid import FAILED, Grid, feature_grid, label, unavailable_subjects
from reports.plots import RUN_PLOT, plot_run
from reports.records import RESULTS_FILE, CaseResult, write_text_atomic
from reports.run import Run, load_run

REPORT_FILE = "report.md"
MAX_DETAILS = 20  # failures shown in full; the rest are listed in a table
MAX_LISTED = 200


def write_report(report_dir: Path, *, plots: bool = True, max_details: int = MAX_DETAILS) -> Path:
    """Render ``report_dir/report.md`` (and its plot) from results.jsonl and summary.json.

    Returns the report's path. Raises ResultsFileError on unreadable input.
    """
    run = load_run(Path(report_dir))
    plot_note = None
    if plots:
        plot_note = _plot(run)
    path = run.folder / REPORT_FILE
    write_text_atomic(path, render_markdown(run, plot_note=plot_note, max_details=max_details))
    return path


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
    if counts["unsupported"]:
        extras.append(f"{counts['unsupported']} unsupported (skipped with the subject's reason)")
    if unavailable:
        extras.append(f"{md.plural(len(unavailable), 'subject')} unavailable here ({', '.join(unavailable)})")
    tail = f"; {'; '.join(extras)}" if extras else ""
    scope = f"{md.plural(cases, 'case')}, {md.plural(len(subjects), 'subject')}"
    if counts["failed"]:
        failing = sorted({r.case.subject for r in results if r.verdict in FAILED})
        errors = f", {counts['error']} of them errors" if counts["error"] else ""
        return (
            f"{prefix}**❌ FAIL** — {counts['failed']} of {md.plural(len(results), 'check')} failed{errors} "
            f"({scope}; failing: {', '.join(failing)}){tail}."
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
    """How each subject ran (e.g. interpret mode on CPU), from summary.json's subjects block."""
    subjects = (run.summary or {}).get("subjects")
    if not isinstance(subjects, list):
        return None
    parts = [
        f"{s['name']}: {s.get('execution') or 'native'}"
        for s in subjects
        if isinstance(s, dict) and s.get("name") and s.get("available", True)
    ]
    return f"Execution · {' · '.join(parts)}" if parts else None


def failure_section(number: int, result: CaseResult) -> str:
    lines = [f"### {number}. ❌ {result.case.subject} · {result.check} · {md.code(result.case.case_id)}", ""]
    if result.verdict == "error":
        lines.append("**Error** (the check or the subject crashed, not a numerical failure)")
        lines.append("")
    lines.append(f"**Case:** {describe_case(result.case)}.")
    lines.append("")
    if result.reason and "\n" in result.reason.strip():  # tracebacks, shrink notes: keep their lines
        lines += ["**Reason:**", "", md.fenced(result.reason.strip(), "text"), ""]
    elif result.reason:
        lines += [f"**Reason:** {md.cell(result.reason)}", ""]
    metric = worst_metric(result)
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
            for m in result.metrics
        ]
        lines += [
            md.table(
                ["tensor", "max-abs error", "tolerance", "ratio", "k", "mean ratio", "out of tol."],
                rows,
                align="lrrrrrr",
            ),
            "",
        ]
    if result.repro:
        lines.append(md.details("Repro script (standalone Python)", md.fenced(result.repro, "python")))
    else:
        lines.append("_No repro script was recorded for this case._")
    return "\n".join(lines)


def failures_table(failures: list[CaseResult], first: int) -> str:
    rows = []
    for number, result in enumerate(failures[:MAX_LISTED], start=first):
        metric = worst_metric(result)
        over = (
            (md.number(metric.max_abs / metric.tolerance) + "×") if metric and metric.tolerance > 0 else "—"
        )
        rows.append(
            [
                number,
                result.case.subject,
                result.check,
                md.code(result.case.case_id),
                metric.tensor if metric else "—",
                over,
                result.reason or "",
            ]
        )
    text = md.table(
        ["#", "subject", "check", "case", "worst", "error / tolerance", "reason"], rows, align="rlllcrl"
    )
    if len(failures) > MAX_LISTED:
        text += f"\n\n… and {len(failures) - MAX_LISTED} more in `{RESULTS_FILE}`."
    return text


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
    results = run.results
    title = f"# Conformance report · jax {run.jax_version}"
    parts = [title, ""]
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
    for subject, reason in unavailable.items():
        parts += [f"🚫 **{subject}** is unavailable here: {md.cell(reason) or 'no reason given'}", ""]
    if plot_note:
        parts += [plot_note, ""]
    failures = sorted(
        (r for r in results if r.verdict in FAILED), key=lambda r: (r.case.subject, r.check, r.case.case_id)
    )
    if failures:
        parts += [f"## Failures ({len(failures)})", ""]
        for number, result in enumerate(failures[:max_details], start=1):
            parts += [failure_section(number, result), ""]
        if len(failures) > max_details:
            parts += [
                f"### Further failures ({len(failures) - max_details})",
                "",
                failures_table(failures[max_details:], max_details + 1),
                "",
            ]
    unsupported = unsupported_summary(results)
    if unsupported:
        parts += [unsupported, ""]
    schema = run.results_file.header.get("schema", "?")
    parts.append(
        f"<sub>From `{RESULTS_FILE}` (schema {schema}) · render again with "
        f"`python -m reports render {display_path(run.folder)}`</sub>"
    )
    return "\n".join(parts).rstrip() + "\n"

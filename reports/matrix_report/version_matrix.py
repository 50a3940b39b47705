"""The version matrix: one report over every ``reports/jax-*/`` folder present.

Its columns are keyed by the library pair that ran, (jax, tokamax): ``0.10.2 + tokamax 0.0.12``, or
``0.10.2`` for a folder without tokamax (every folder written before tokamax was recorded reads so).
Subject x version verdicts, the drift of the error ratio from version to version,
the checks whose ratio moved most, and capabilities that appeared or vanished.
A folder that cannot be read is listed with its one-line error; the rest still render.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from reports.jax_versions import sort_versions
from reports.run_report import markdown as md
from reports.run_report.describe import worst_ratio
from reports.run_report.grid import FAILED, feature_grid, label, nothing_checked
from reports.run_report.grouping import cause_count_line, group_causes, known_count_line
from reports.run_report.plots import (
    MATRIX_LENGTH_PLOT,
    MATRIX_VERSION_PLOT,
    plot_versions,
    plot_versions_by_length,
)
from run_records.environment import one_line
from run_records.results_file import RESULTS_FILE, ResultsFileError, write_text_atomic
from run_records.run_folder import Run, load_run

MATRIX_DIR = "matrix"
REPORT_FILE = "report.md"
TOP_DRIFTS = 15
MAX_FINDINGS = 50  # rows of the findings-by-version table
MOVE_THRESHOLD = 0.2  # per-check ratio moves smaller than 20% are version-to-version rounding noise
MOVE_MIN_RATIO = 0.1  # ...and so are moves among ratios far below 1 (near-exact values, e.g. a bf16 lse)


@dataclasses.dataclass(frozen=True)
class Matrix:
    runs: tuple[Run, ...]  # oldest (jax, tokamax) first; no tokamax before any tokamax
    unreadable: tuple[tuple[Path, str], ...]  # folder, the one-line error

    @property
    def versions(self) -> tuple[str, ...]:
        """Column labels: the (jax, tokamax) pair (``Run.versions``), or the folder name where two runs
        share a pair."""
        versions = [run.versions for run in self.runs]
        return tuple(
            v if versions.count(v) == 1 else run.folder.name
            for v, run in zip(versions, self.runs, strict=True)
        )

    def label(self, run: Run) -> str:
        return self.versions[self.runs.index(run)]

    @property
    def with_tokamax(self) -> bool:
        """Whether any run had tokamax installed: the columns are then (jax, tokamax) pairs."""
        return any(run.tokamax_version is not None for run in self.runs)

    @property
    def axis(self) -> str:
        """What a column is, in words: ``JAX version`` or ``jax + tokamax version``."""
        return "jax + tokamax version" if self.with_tokamax else "JAX version"

    @property
    def subjects(self) -> tuple[str, ...]:
        return tuple(sorted({r.case.subject for run in self.runs for r in run.results}))


def discover(root: Path) -> list[Path]:
    """The ``jax-*`` report folders under ``root`` (normally ``reports/``)."""
    return sorted(p for p in Path(root).glob("jax-*") if p.is_dir())


def load_matrix(folders: Sequence[Path]) -> Matrix:
    runs, unreadable = [], []
    for folder in folders:
        try:
            runs.append(load_run(folder))
        except ResultsFileError as exc:
            unreadable.append((Path(folder), str(exc)))
    return Matrix(in_release_order(runs), tuple(unreadable))


def in_release_order(runs: Sequence[Run]) -> tuple[Run, ...]:
    """Runs by jax release, then tokamax release (a run without tokamax first), then folder name."""
    jax = sort_versions(list({r.jax_version for r in runs}))
    tokamax = sort_versions(list({r.tokamax_version for r in runs if r.tokamax_version is not None}))

    def key(run: Run) -> tuple[int, int, str]:
        second = -1 if run.tokamax_version is None else tokamax.index(run.tokamax_version)
        return (jax.index(run.jax_version), second, run.folder.name)

    return tuple(sorted(runs, key=key))


def write_matrix(root: Path, out_dir: Path | None = None, *, plots: bool = True) -> Path:
    """Render ``<root>/matrix/report.md`` (and plots) over every ``<root>/jax-*/``.

    Raises ResultsFileError when no folder can be read at all.
    """
    root = Path(root)
    out_dir = Path(out_dir) if out_dir else root / MATRIX_DIR
    folders = discover(root)
    matrix = load_matrix(folders)
    if not matrix.runs:
        problems = "; ".join(error for _, error in matrix.unreadable)
        raise ResultsFileError(
            f"{root}: no readable jax-*/{RESULTS_FILE} "
            f"({problems or 'no jax-* folders'}); run `nox -s \"conformance(jax='X')\"` first"
        )
    links = []
    if plots:
        links = _plots(matrix, out_dir)
    path = out_dir / REPORT_FILE
    write_text_atomic(path, render_matrix(matrix, plot_links=links))
    return path


def _plots(matrix: Matrix, out_dir: Path) -> list[str]:
    try:
        by_version = {matrix.label(run): run.results for run in matrix.runs}
        drawn = [
            (
                plot_versions(by_version, out_dir / MATRIX_VERSION_PLOT),
                f"Worst error ratio per {matrix.axis}",
            ),
            (
                plot_versions_by_length(by_version, out_dir / MATRIX_LENGTH_PLOT),
                f"Error ratio against sequence length, by {matrix.axis}",
            ),
        ]
    except ImportError:
        return ["_No plots: matplotlib is not installed in this environment._"]
    return [f"📈 [{title}]({path.name})" for path, title in drawn if path is not None]


KNOWN_CELL = {
    "reproduced": "🐞",
    "no longer reproduces": "✅ fixed",
    "stale": "⚠️ stale",
    "not run here": "·",
    "out of range": "·",
}


def known_issue_rows(matrix: Matrix) -> list[list[str]]:
    """Per ledger entry, its ranges (jax; tokamax too where an entry has one), what each version saw;
    the last column flags an entry whose range disagrees with where it was observed (it reproduced
    outside it, or not inside it)."""
    entries: dict[str, dict[str, dict]] = {}
    with_tokamax = _tokamax_ranges(matrix)
    for run in matrix.runs:
        for status in (run.summary or {}).get("known_issues", []) or []:
            if isinstance(status, dict) and status.get("id"):
                entries.setdefault(status["id"], {})[matrix.label(run)] = status
    rows = []
    for entry_id, by_version in sorted(entries.items()):
        cells, disagree = [], []
        for version in matrix.versions:
            status = by_version.get(version)
            if status is None:
                cells.append(md.STATUS_ICON["not run"])
                continue
            state = status.get("status", "")
            outside = state == "out of range" and status.get("failing_outside_range", 0)
            cells.append("⚠️ 🐞 outside range" if outside else KNOWN_CELL.get(state, state))
            if outside:
                disagree.append(f"fails at {version}, outside its range")
            elif state == "no longer reproduces":
                disagree.append(f"passes at {version}, inside its range")
        spec = next((s.get("jax") for s in by_version.values() if s.get("jax") is not None), "")
        tokamax = next((s.get("tokamax") for s in by_version.values() if s.get("tokamax")), "")
        ranges = [md.code(spec or "any"), *([md.code(tokamax or "any")] if with_tokamax else [])]
        rows.append([md.code(entry_id), *ranges, *cells, "; ".join(disagree) if disagree else "agrees"])
    return rows


def _tokamax_ranges(matrix: Matrix) -> bool:
    """Whether any ledger entry a run reports has a tokamax range (its column is then shown)."""
    return any(
        isinstance(status, dict) and status.get("tokamax")
        for run in matrix.runs
        for status in (run.summary or {}).get("known_issues", []) or []
    )


def observed_rows(matrix: Matrix) -> list[list[str]]:
    """Per subject and open behaviour, what each version did (several classes when cases differ)."""
    seen: dict[tuple[str, str], dict[str, set[str]]] = {}
    for run in matrix.runs:
        for result in run.results:
            for what, value in result.observed.items():
                by_version = seen.setdefault((result.case.subject, what), {})
                by_version.setdefault(matrix.label(run), set()).add(value)
    return [
        [subject, what, *[", ".join(sorted(by_version.get(v, ()))) or "·" for v in matrix.versions]]
        for (subject, what), by_version in sorted(seen.items())
    ]


def version_cell(run: Run, subject: str) -> str:
    results = [r for r in run.results if r.case.subject == subject]
    if not results:
        return md.STATUS_ICON["not run"]
    if nothing_checked(results) and not any(r.verdict == "unavailable" for r in results):
        return f"⛔ nothing checked (➖ {len(results)} unsupported)"
    grid = feature_grid(results)
    cell = grid.cell(subject, "all")
    unsupported = f" · ➖ {cell.tally['unsupported']}" if cell.tally["unsupported"] else ""
    if cell.status == "fail":
        failing = [label(f) for f in grid.features if grid.status(subject, f) == "fail"][:4]
        causes = md.plural(len(group_causes(r for r in results if r.verdict in FAILED)), "root cause")
        return (
            f"❌ {cell.failed}/{cell.total} · {causes}"
            + (f" ({', '.join(failing)})" if failing else "")
            + unsupported
        )
    known_causes = group_causes(r for r in results if r.verdict == "known")
    known = (
        f" · 🐞 {cell.tally['known']} known ({md.plural(len(known_causes), 'issue')})"
        if cell.tally["known"]
        else ""
    )
    if cell.status in ("pass", "known", "flaky"):
        return f"✅ {cell.tally['pass']}{known}{unsupported}"
    return md.STATUS_ICON[cell.status]


def ratio_stats(run: Run, subject: str, dtype: str) -> tuple[float, float] | None:
    """(worst, median) error ratio of a subject's checks in one dtype, or None if none measured one."""
    ratios = [worst_ratio(r) for r in run.results if r.case.subject == subject and r.case.dtype == dtype]
    ratios = [r for r in ratios if r is not None]
    return (max(ratios), statistics.median(ratios)) if ratios else None


def drift_table(matrix: Matrix) -> str | None:
    keys = sorted({(r.case.subject, r.case.dtype) for run in matrix.runs for r in run.results if r.metrics})
    if not keys:
        return None
    rows = []
    for subject, dtype in keys:
        row, previous = [f"{subject} · {dtype}"], None
        for run in matrix.runs:
            stats = ratio_stats(run, subject, dtype)
            if stats is None:
                row.append(md.STATUS_ICON["not run"])
                continue
            worst, median = stats
            change = md.change(previous, worst) if previous is not None else ""
            row.append(f"{md.number(worst)}{f' ({change})' if change else ''} · med {md.number(median)}")
            previous = worst
        rows.append(row)
    return md.table(["subject · dtype", *matrix.versions], rows, align="l" + "r" * len(matrix.versions))


def case_drifts(matrix: Matrix, top: int = TOP_DRIFTS) -> list[list[str]]:
    """The checks whose headline ratio moved most (by factor, beyond MOVE_THRESHOLD) between
    consecutive versions, largest first."""
    moves = []
    for older, newer in zip(matrix.runs, matrix.runs[1:], strict=False):
        before = {r.key: r for r in older.results}
        for result in newer.results:
            old = before.get(result.key)
            if old is None:
                continue
            a, b = worst_ratio(old), worst_ratio(result)
            if a is None or b is None or a <= 0 or b <= 0 or max(a, b) < MOVE_MIN_RATIO:
                continue
            factor = b / a
            if abs(math.log(factor)) > math.log(1 + MOVE_THRESHOLD):
                moves.append(
                    (abs(math.log(factor)), matrix.label(older), matrix.label(newer), result, a, b, factor)
                )
    moves.sort(key=lambda m: -m[0])
    return [
        [
            r.case.subject,
            r.check,
            md.code(r.case.case_id),
            f"{v1} → {v2}",
            f"{md.number(a)} → {md.number(b)}",
            md.change(a, b),
        ]
        for _, v1, v2, r, a, b, factor in moves[:top]
    ]


def capability_changes(matrix: Matrix) -> list[list[str]]:
    """Grid cells whose status changed between consecutive versions (pass <-> unsupported, etc.).
    A cell an incomplete run never reached is no change: the run stopped before it."""
    rows = []
    for older, newer in zip(matrix.runs, matrix.runs[1:], strict=False):
        old_grid, new_grid = feature_grid(older.results), feature_grid(newer.results)
        for subject in sorted(set(old_grid.subjects) | set(new_grid.subjects)):
            for feature in ("all", *sorted(set(old_grid.features) | set(new_grid.features))):
                a, b = old_grid.status(subject, feature), new_grid.status(subject, feature)
                unreached = "not run" in (a, b) and not (older.complete and newer.complete)
                if a != b and not unreached:
                    rows.append(
                        [
                            subject,
                            label(feature),
                            f"{matrix.label(older)} → {matrix.label(newer)}",
                            f"{md.STATUS_ICON[a]} {a} → {md.STATUS_ICON[b]} {b}",
                        ]
                    )
    return rows


def verdict_line(matrix: Matrix) -> str:
    failing = []
    for run in matrix.runs:
        causes = group_causes(r for r in run.results if r.verdict in FAILED)
        if causes:
            failing.append(f"{matrix.label(run)}: {cause_count_line(causes)}")
    known_results = [r for run in matrix.runs for r in run.results if r.verdict == "known"]
    known = len(known_results)
    known_tail = f"; 🐞 {known_count_line(group_causes(known_results))}" if known else ""
    incomplete = [matrix.label(run) for run in matrix.runs if not run.complete]
    tail = f"; ⚠️ incomplete: {', '.join(incomplete)}" if incomplete else ""
    not_run = [matrix.label(run) for run in matrix.runs if nothing_checked(run.results)]
    tail += f"; ⛔ NOT RUN (nothing was checked): {', '.join(not_run)}" if not_run else ""
    if matrix.unreadable:
        tail += f"; ⚠️ {md.plural(len(matrix.unreadable), 'folder')} unreadable"
    span = f"{md.plural(len(matrix.runs), matrix.axis)} ({matrix.versions[0]} … {matrix.versions[-1]})"
    if failing:
        return (
            f"**❌ FAILURES** in {md.plural(len(failing), 'version')} of {span}: {', '.join(failing)}"
            f"{known_tail}{tail}."
        )
    if known:
        return f"**✅ PASS (known issues only)** — no unexplained failure in {span}{known_tail}{tail}."
    return f"**✅ PASS** — every check that ran passed in all {span}{tail}."


def findings_rows(matrix: Matrix, top: int = MAX_FINDINGS) -> list[list[str]]:
    """Failing checks grouped by root cause over every version (reports.run_report.grouping, as in report.md):
    per cause, each version's failing checks (❌ n), ✅ where its checks ran and passed, · where
    none ran. A cause that appears or goes away at an upgrade shows as a change along its row."""
    version_of: dict[int, str] = {}
    failing = []
    for run in matrix.runs:
        for result in run.results:
            if result.verdict in FAILED:
                version_of[id(result)] = matrix.label(run)
                failing.append(result)
    rows = []
    for cause in group_causes(failing)[:top]:
        keys = {r.key for r in cause.results}
        cells = []
        for run in matrix.runs:
            version = matrix.label(run)
            failed = sum(version_of[id(r)] == version for r in cause.results)
            ran = any(r.key in keys and r.verdict == "pass" for r in run.results)
            cells.append(f"❌ {failed}" if failed else ("✅" if ran else md.STATUS_ICON["not run"]))
        rows.append(
            [
                cause.subject,
                f"{', '.join(cause.checks)} ({', '.join(cause.dtypes)})",
                f"{md.plural(len(cause.case_ids), 'case')}, smallest {md.code(cause.smallest.case.case_id)}",
                *cells,
            ]
        )
    return rows


def _folder_link(run: Run) -> str:
    """The run's folder, linked to its report.md when it has one (the matrix sits next to it)."""
    if (run.folder / REPORT_FILE).exists():
        return f"[{run.folder.name}](../{run.folder.name}/{REPORT_FILE})"
    return md.code(run.folder.name)


def render_matrix(matrix: Matrix, *, plot_links: Sequence[str] = ()) -> str:
    """The whole matrix report.md (pure)."""
    title = "JAX and tokamax versions" if matrix.with_tokamax else "JAX versions"
    parts = [f"# Conformance matrix · {title}", "", verdict_line(matrix), ""]
    rows = [
        [f"**{subject}**", *[version_cell(run, subject) for run in matrix.runs]]
        for subject in matrix.subjects
    ]
    parts += [
        md.table(["subject", *matrix.versions], rows, align="l" + "c" * len(matrix.runs)),
        "",
        md.LEGEND,
        "",
    ]
    parts += [*[f"{link}  " for link in plot_links], ""] if plot_links else []
    drift = drift_table(matrix)
    if drift:
        parts += [
            "## Error-ratio drift",
            "",
            "Worst error ratio (subject / same-dtype baseline) per subject and dtype, its change from the "
            "previous version in brackets, and the median over all checks.",
            "",
            drift,
            "",
        ]
    moves = case_drifts(matrix)
    parts += [
        f"## Checks whose error ratio moved by more than {MOVE_THRESHOLD:.0%} between consecutive versions",
        "",
        f"Moves among ratios below {MOVE_MIN_RATIO:g} (near-exact values) are left out as noise.",
        "",
    ]
    if moves:
        parts += [md.table(["subject", "check", "case", "versions", "ratio", "change"], moves, "llllrr"), ""]
    else:
        parts += ["None.", ""]
    findings = findings_rows(matrix)
    if findings:
        total = len(group_causes(r for run in matrix.runs for r in run.results if r.verdict in FAILED))
        more = f" The first {MAX_FINDINGS} of {total}." if total > MAX_FINDINGS else ""
        parts += [
            "## Failures by version",
            "",
            "Failing checks grouped by root cause, as in each report.md: the same checks failing with "
            "the same message (numbers aside), over every case. ❌ n: n of its checks fail in that "
            f"version · ✅ they ran and passed · · none ran.{more}",
            "",
            md.table(["subject", "checks (dtypes)", "cases", *matrix.versions], findings),
            "",
        ]
    known = known_issue_rows(matrix)
    if known:
        parts += [
            "## Known issues by version",
            "",
            "🐞 reproduced · ✅ fixed (in range, every selected check passes) · ⚠️ stale · · not run or out "
            "of range. The last column flags a range that disagrees with what was observed.",
            "",
            md.table(
                [
                    "entry",
                    "jax range",
                    *(["tokamax range"] if _tokamax_ranges(matrix) else []),
                    *matrix.versions,
                ]
                + ["range vs observed"],
                known,
            ),
            "",
        ]
    observed = observed_rows(matrix)
    if observed:
        parts += [
            "## Observed behaviour where the semantics are open",
            "",
            md.table(["subject", "what", *matrix.versions], observed),
            "",
        ]
    changes = capability_changes(matrix)
    if changes:
        parts += [
            "## What changed between versions",
            "",
            md.table(["subject", "column", "versions", "status"], changes),
            "",
        ]
    version_rows = [
        [
            matrix.label(run),
            _folder_link(run),
            len(run.results),
            "yes" if run.complete else "⚠️ **no**",
            one_line(run.environment) if run.environment else "unknown",
        ]
        for run in matrix.runs
    ]
    parts += [
        "## Runs",
        "",
        md.table(
            [
                "jax + tokamax" if matrix.with_tokamax else "jax",
                "folder",
                "checks",
                "complete",
                "environment",
            ],
            version_rows,
            "llrcl",
        ),
        "",
    ]
    if matrix.unreadable:
        parts += [
            "## Unreadable folders",
            "",
            *[f"- {md.code(folder.name)}: {md.cell(error)}" for folder, error in matrix.unreadable],
            "",
        ]
    parts.append("<sub>Render again with `nox -s matrix` or `python -m reports matrix reports`.</sub>")
    return "\n".join(parts).rstrip() + "\n"

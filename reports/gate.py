"""The upgrade gate: compare a candidate run (e.g. a new JAX) against a base run.

The candidate fails the gate when it
  * fails a check that the base passed (newly failing);
  * drifts an error ratio beyond ``ratio_drift`` (relative), on a check both pass,
    unless the candidate's ratio stays at or below ``ratio_floor``: no worse than
    the plain same-dtype attention, which is noise, not a regression;
  * loses a subject (it ran in the base, it is unavailable or absent now) or a
    capability (a grid column the base passed is unsupported or gone now);
  * when both folders hold benchmarks.json, is slower than ``max_slowdown`` or
    needs more peak memory than ``max_memory_growth`` (both relative);
  * is incomplete (killed or crashed), unless ``allow_incomplete``: a partial run
    cannot approve an upgrade, but its findings are still listed.
Fixed checks (failing in the base, passing now) are listed, never fatal.
Either folder may come from another machine, e.g. a TPU host.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from reports import markdown as md
from reports.benchmarks import Benchmark, read_benchmarks
from reports.describe import worst_metric
from reports.environment import one_line
from reports.grid import FAILED, feature_grid
from reports.records import CaseResult
from reports.run import Run, load_run

EXIT_PASS, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
MAX_ROWS = 50


@dataclasses.dataclass(frozen=True)
class Thresholds:
    ratio_drift: float = 0.5  # flag a candidate error ratio more than 50% above the base's ...
    ratio_floor: float = 1.0  # ... unless it is still <= 1: no worse than the plain baseline
    max_slowdown: float = 0.25  # median time per call up by more than 25% (shared CI machines are noisy)
    max_memory_growth: float = 0.10  # peak memory up by more than 10%
    allow_incomplete: bool = False

    def __post_init__(self) -> None:
        for name in ("ratio_drift", "ratio_floor", "max_slowdown", "max_memory_growth"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"threshold {name} must be a finite number >= 0, got {value!r}")

    def describe(self) -> str:
        return (
            f"ratio drift > +{self.ratio_drift:.0%} "
            f"(ignored while the candidate ratio ≤ {self.ratio_floor:g}) · "
            f"slowdown > {self.max_slowdown:.0%} · peak memory > +{self.max_memory_growth:.0%} · "
            f"incomplete runs {'allowed' if self.allow_incomplete else 'fail the gate'}"
        )


@dataclasses.dataclass(frozen=True)
class Finding:
    rule: str  # one of RULES, or "fixed"
    subject: str
    what: str  # the check and case, the feature, or the benchmark
    base: str
    candidate: str
    detail: str = ""


RULES = {
    "incomplete": "Incomplete input",
    "newly failing": "Newly failing",
    "ratio drift": "Error-ratio drift",
    "lost subject": "Lost subjects (API break)",
    "lost capability": "Lost capabilities (API break)",
    "slower": "Slower",
    "more memory": "More memory",
}


@dataclasses.dataclass(frozen=True)
class GateResult:
    base: Run
    candidate: Run
    thresholds: Thresholds
    regressions: tuple[Finding, ...]
    fixed: tuple[Finding, ...]
    notes: tuple[str, ...]
    compared: int  # checks present in both runs

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_REGRESSION


def _what(result: CaseResult) -> str:
    return f"{result.check} · {result.case.case_id}"


def _index(run: Run) -> dict[tuple[str, str, str], CaseResult]:
    return {r.key: r for r in run.results}


def newly_failing(base: Run, candidate: Run) -> list[Finding]:
    cand = _index(candidate)
    return [
        Finding(
            "newly failing",
            r.case.subject,
            _what(r),
            r.verdict,
            cand[key].verdict,
            _failure_detail(cand[key]),
        )
        for key, r in sorted(_index(base).items())
        if r.verdict == "pass" and key in cand and cand[key].verdict in FAILED
    ]


def _failure_detail(result: CaseResult) -> str:
    """Short enough for a table cell: the worst tensor's ratio against its k, else the first
    line of the reason (the full story is in that run's report.md)."""
    metric = worst_metric(result)
    if metric is not None:
        return f"{metric.tensor}: ratio {md.number(metric.ratio)} (k {metric.k:g})"
    return md.truncate(result.reason.strip().splitlines()[0] if result.reason.strip() else "")


def fixed(base: Run, candidate: Run) -> list[Finding]:
    cand = _index(candidate)
    return [
        Finding("fixed", r.case.subject, _what(r), r.verdict, "pass", "was " + _failure_detail(r))
        for key, r in sorted(_index(base).items())
        if r.verdict in FAILED and key in cand and cand[key].verdict == "pass"
    ]


def ratio_drifts(base: Run, candidate: Run, thresholds: Thresholds) -> list[Finding]:
    """Checks that pass in both whose error ratio (max-abs or mean-abs) grew beyond the threshold."""
    cand = _index(candidate)
    findings = []
    for key, old in sorted(_index(base).items()):
        new = cand.get(key)
        if old.verdict != "pass" or new is None or new.verdict != "pass":
            continue
        new_metrics = {m.tensor: m for m in new.metrics}
        for old_metric in old.metrics:
            new_metric = new_metrics.get(old_metric.tensor)
            if new_metric is None:
                continue
            for field in ("ratio", "mean_ratio"):
                before, after = getattr(old_metric, field), getattr(new_metric, field)
                if _drifted(before, after, thresholds):
                    change = (
                        "new non-finite ratio" if not math.isfinite(after) else f"+{after / before - 1:.0%}"
                    )
                    label = "ratio" if field == "ratio" else "mean ratio"
                    findings.append(
                        Finding(
                            "ratio drift",
                            old.case.subject,
                            f"{_what(old)} · {old_metric.tensor} {label}",
                            md.number(before),
                            md.number(after),
                            change,
                        )
                    )
    return findings


def _drifted(before: float, after: float, thresholds: Thresholds) -> bool:
    if math.isnan(after) and not math.isnan(before):
        return True
    if not math.isfinite(before) or math.isnan(after):
        return False  # nothing to compare against (e.g. a zero baseline error in the base)
    if math.isinf(after):
        return True
    return after > thresholds.ratio_floor and after > before * (1 + thresholds.ratio_drift)


def lost_capabilities(base: Run, candidate: Run) -> list[Finding]:
    """Subjects that ran in the base but not now; grid columns the base passed that are gone now."""
    findings = []
    old_grid, new_grid = feature_grid(base.results), feature_grid(candidate.results)
    ran_before = {r.case.subject for r in base.results if r.verdict != "unavailable"}
    ran_now = {r.case.subject for r in candidate.results if r.verdict != "unavailable"}
    for subject in sorted(ran_before - ran_now):
        reasons = {r.reason for r in candidate.results if r.case.subject == subject and r.reason}
        if subject in new_grid.subjects:
            findings.append(
                Finding(
                    "lost subject",
                    subject,
                    "availability",
                    "available",
                    "unavailable",
                    "; ".join(sorted(reasons)),
                )
            )
        elif candidate.complete:
            findings.append(
                Finding(
                    "lost subject",
                    subject,
                    "availability",
                    "available",
                    "absent",
                    "the candidate run has no result for this subject",
                )
            )
    for subject in sorted(ran_before & ran_now):
        for feature in old_grid.features:
            before, after = old_grid.status(subject, feature), new_grid.status(subject, feature)
            gone = after in ("unsupported", "unavailable") or (after == "not run" and candidate.complete)
            if before == "pass" and gone:
                findings.append(Finding("lost capability", subject, feature, before, after))
    # A single shape or option can stop being supported while its columns still pass
    # elsewhere (e.g. lengths that are not a multiple of a block): list those checks too,
    # unless a lost column above already covers them.
    lost_columns = {(f.subject, f.what) for f in findings}
    cand = _index(candidate)
    for key, old in sorted(_index(base).items()):
        new = cand.get(key)
        if old.verdict != "pass" or new is None or new.verdict not in ("unsupported", "unavailable"):
            continue
        if old.case.subject in ran_now and not any(
            (old.case.subject, f) in lost_columns for f in old.features
        ):
            findings.append(
                Finding(
                    "lost capability",
                    old.case.subject,
                    _what(old),
                    "pass",
                    new.verdict,
                    md.truncate(new.reason),
                )
            )
    return findings


def benchmark_regressions(
    base: dict[str, Benchmark], candidate: dict[str, Benchmark], thresholds: Thresholds
) -> tuple[list[Finding], list[str]]:
    findings, notes = [], []
    skipped = 0
    for name in sorted(base.keys() & candidate.keys()):
        old, new = base[name], candidate[name]
        if old.execution != new.execution:
            skipped += 1
            continue
        if old.median_s > 0 and new.median_s > old.median_s * (1 + thresholds.max_slowdown):
            findings.append(
                Finding(
                    "slower",
                    new.subject,
                    name,
                    _seconds(old.median_s),
                    _seconds(new.median_s),
                    f"+{new.median_s / old.median_s - 1:.0%}",
                )
            )
        if (
            old.memory_bytes
            and new.memory_bytes is not None
            and old.memory_kind == new.memory_kind
            and new.memory_bytes > old.memory_bytes * (1 + thresholds.max_memory_growth)
        ):
            findings.append(
                Finding(
                    "more memory",
                    new.subject,
                    f"{name} ({old.memory_kind})",
                    _bytes(old.memory_bytes),
                    _bytes(new.memory_bytes),
                    f"+{new.memory_bytes / old.memory_bytes - 1:.0%}",
                )
            )
    if skipped:
        notes.append(
            f"{md.plural(skipped, 'benchmark')} not compared: base and candidate ran them differently "
            "(interpret mode vs native); such timings never mix."
        )
    only = len(base.keys() ^ candidate.keys())
    if only:
        notes.append(f"{md.plural(only, 'benchmark')} present on one side only, not compared.")
    return findings, notes


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def compare(
    base: Run,
    candidate: Run,
    thresholds: Thresholds | None = None,
    base_benchmarks: dict[str, Benchmark] | None = None,
    candidate_benchmarks: dict[str, Benchmark] | None = None,
) -> GateResult:
    """The gate's verdict (pure: both runs already read)."""
    thresholds = thresholds or Thresholds()
    regressions: list[Finding] = []
    notes: list[str] = []
    for name, run in (("base", base), ("candidate", candidate)):
        if not run.complete:
            finding = Finding(
                "incomplete",
                "",
                name,
                "",
                "incomplete",
                f"{run.folder.name}/{run.results_file.path.name} has no end record "
                f"({len(run.results)} results before the stop)",
            )
            if thresholds.allow_incomplete:
                notes.append(f"The {name} run is incomplete; compared on the checks it recorded.")
            else:
                regressions.append(finding)
    regressions += newly_failing(base, candidate)
    regressions += ratio_drifts(base, candidate, thresholds)
    regressions += lost_capabilities(base, candidate)
    if base_benchmarks is not None and candidate_benchmarks is not None:
        found, bench_notes = benchmark_regressions(base_benchmarks, candidate_benchmarks, thresholds)
        regressions += found
        notes += bench_notes
    elif base_benchmarks is not None or candidate_benchmarks is not None:
        side = "base" if base_benchmarks is not None else "candidate"
        notes.append(f"Speed and memory not compared: only the {side} has benchmarks.json.")
    base_keys, cand_keys = set(_index(base)), set(_index(candidate))
    if base_keys - cand_keys:
        notes.append(
            f"{md.plural(len(base_keys - cand_keys), 'check')} only in the base (not run by the candidate)."
        )
    if cand_keys - base_keys:
        notes.append(f"{md.plural(len(cand_keys - base_keys), 'check')} only in the candidate (new).")
    return GateResult(
        base,
        candidate,
        thresholds,
        tuple(regressions),
        tuple(fixed(base, candidate)),
        tuple(notes),
        len(base_keys & cand_keys),
    )


def gate(base_dir: Path, candidate_dir: Path, thresholds: Thresholds | None = None) -> GateResult:
    """Read both folders (ResultsFileError on bad input) and compare them."""
    base, candidate = load_run(base_dir), load_run(candidate_dir)
    return compare(
        base, candidate, thresholds, read_benchmarks(base.folder), read_benchmarks(candidate.folder)
    )


def _run_line(role: str, run: Run) -> str:
    state = "complete" if run.complete else "⚠️ **incomplete**"
    env = one_line(run.environment) if run.environment else "environment unknown"
    return f"**{role}:** {run.label} · {state} · {len(run.results)} checks · {env}"


def _finding_rows(findings: list[Finding]) -> list[list[str]]:
    rows = [[f.subject or "—", f.what, f.base, f.candidate, f.detail] for f in findings[:MAX_ROWS]]
    if len(findings) > MAX_ROWS:
        rows.append(["…", f"and {len(findings) - MAX_ROWS} more", "", "", ""])
    return rows


def render_gate(result: GateResult) -> str:
    """The gate's verdict as Markdown, for a terminal or a review."""
    base, cand = result.base, result.candidate
    if result.passed:
        verdict = (
            f"## ✅ Upgrade gate: PASS — {cand.label} has no regression against {base.label} "
            f"({md.plural(result.compared, 'check')} compared, {len(result.fixed)} fixed)"
        )
    else:
        verdict = (
            f"## ❌ Upgrade gate: FAIL — {md.plural(len(result.regressions), 'regression')} in "
            f"{cand.label} against {base.label} ({md.plural(result.compared, 'check')} compared)"
        )
    parts = [verdict, "", _run_line("Base", base), "", _run_line("Candidate", cand), ""]
    by_rule: dict[str, list[Finding]] = {}
    for finding in result.regressions:
        by_rule.setdefault(finding.rule, []).append(finding)
    if by_rule:
        parts += [
            md.table(["rule", "regressions"], [[RULES[r], len(f)] for r, f in by_rule.items()], "lr"),
            "",
        ]
    for rule, findings in by_rule.items():
        parts += [
            f"### ❌ {RULES[rule]} ({len(findings)})",
            "",
            md.table(["subject", "what", "base", "candidate", "detail"], _finding_rows(findings)),
            "",
        ]
    if result.fixed:
        parts += [
            f"### ✅ Fixed ({len(result.fixed)})",
            "",
            md.table(["subject", "what", "base", "candidate", "detail"], _finding_rows(list(result.fixed))),
            "",
        ]
    if result.notes:
        parts += ["### Notes", "", *[f"- {note}" for note in result.notes], ""]
    parts.append(
        f"<sub>Thresholds: {result.thresholds.describe()}. Change them with "
        "`--ratio-drift`, `--ratio-floor`, `--max-slowdown`, `--max-memory-growth`, "
        "`--allow-incomplete`.</sub>"
    )
    return "\n".join(parts) + "\n"

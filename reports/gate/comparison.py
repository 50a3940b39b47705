"""The gate's verdict on two report folders: every rule of ``rules.py`` and the benchmark
comparison applied to a base and a candidate run (``gate`` reads the folders, ``compare`` is pure)."""

from __future__ import annotations

from pathlib import Path

from reports.gate.benchmark_comparison import benchmark_regressions
from reports.gate.findings import (
    Finding,
    GateResult,
)
from reports.gate.rules import (
    behaviour_changes,
    fixed,
    fixed_known_issues,
    flaky_results,
    known_issues_unexplained_in_candidate,
    lost_capabilities,
    newly_failing,
    precision_improvements,
    ratio_drifts,
    ratio_pairs,
    results_by_key,
)
from reports.gate.thresholds import Thresholds
from reports.run_report import markdown as md
from reports.run_report.grid import not_checked_reasons, nothing_checked
from run_records.benchmarks_file import Benchmark, read_benchmarks
from run_records.results_file import ResultsFileError
from run_records.run_folder import Run, load_run


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
    pairs = ratio_pairs(base, candidate)  # read by the drift rules and the precision gains alike
    regressions += ratio_drifts(pairs, thresholds)
    regressions += lost_capabilities(base, candidate)
    changes = behaviour_changes(base, candidate)
    if thresholds.allow_behaviour_change:
        if changes:
            listed = "; ".join(f"{f.what}: {f.base} → {f.candidate}" for f in changes[:5])
            notes.append(
                f"{md.plural(len(changes), 'behaviour change')} allowed "
                f"(--allow-behaviour-change): {listed}" + (" …" if len(changes) > 5 else "")
            )
    else:
        regressions += changes
    notes += precision_improvements(pairs, thresholds)
    for label in fixed_known_issues(base, candidate):
        notes.append(f"The candidate fixes {label}: every check it explained in the base passes now.")
    for label, count in known_issues_unexplained_in_candidate(base, candidate):
        notes.append(
            f"⚠️ {md.plural(count, 'check')} of {label} still fail in the candidate, unexplained there: "
            "no regression, but the candidate's own run is red (does the entry's range end too early?)."
        )
    if base_benchmarks is not None and candidate_benchmarks is not None:
        found, bench_notes = benchmark_regressions(base_benchmarks, candidate_benchmarks, thresholds)
        regressions += found
        notes += bench_notes
    elif base_benchmarks is not None or candidate_benchmarks is not None:
        side = "base" if base_benchmarks is not None else "candidate"
        notes.append(f"Speed and memory not compared: only the {side} has benchmarks.json.")
    base_keys, cand_keys = set(results_by_key(base)), set(results_by_key(candidate))
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
        tuple(flaky_results(candidate)),
    )


def gate(base_dir: Path, candidate_dir: Path, thresholds: Thresholds | None = None) -> GateResult:
    """Read both folders (ResultsFileError on bad input, or on a folder where nothing was
    checked) and compare them."""
    base, candidate = load_run(base_dir), load_run(candidate_dir)
    for role, run in (("base", base), ("candidate", candidate)):
        refuse_not_run(role, run)
    return compare(
        base, candidate, thresholds, read_benchmarks(base.folder), read_benchmarks(candidate.folder)
    )


def refuse_not_run(role: str, run: Run) -> None:
    """A run that checked nothing (every subject unavailable, every check unsupported) approves
    nothing and regresses nothing: comparing it would be a false green. One line, naming why."""
    if not nothing_checked(run.results):
        return
    reasons = "; ".join(f"{s}: {md.truncate(r, 120)}" for s, r in not_checked_reasons(run.results).items())
    raise ResultsFileError(
        f"{run.folder}: NOT RUN, nothing was checked ({reasons or 'no check recorded'}); the {role} cannot "
        "be compared: rerun it where its subjects are available"
    )

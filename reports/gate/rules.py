"""The upgrade gate: compare a candidate run (e.g. a new JAX) against a base run.

The candidate fails the gate when it
  * fails a check that the base passed (newly failing);
  * drifts its error ratios systematically: over the checks both pass, per subject ×
    dtype × tensor × (max-abs or mean-abs ratio), the median of the per-case changes
    exceeds ``1 + ratio_drift`` at ``drift_confidence`` (a sign-test lower bound on that
    median; at least ``drift_min_cases`` cases);
  * moves a single case's error close to its tolerance (above ``near_tolerance`` of
    k x baseline + floor) from well below it (under ``well_below``), or makes it non-finite;
  * loses a subject (it ran in the base, it is unavailable or absent now) or a
    capability (a grid column the base passed is unsupported or gone now);
  * when both folders hold benchmarks.json, is slower than ``max_slowdown`` or
    needs more peak memory than ``max_memory_growth`` (both relative);
  * is incomplete (killed or crashed), unless ``allow_incomplete``: a partial run
    cannot approve an upgrade, but its findings are still listed.
Fixed checks (failing in the base, passing now) are listed, never fatal.
Either folder may come from another machine, e.g. a TPU host.

Why the drift rules look at groups and at the tolerance, not at one case's relative change: a
case's max-abs ratio is a noisy statistic. Outputs differ by about an ulp between JAX
releases, and where the baseline's own error is a few ulp one ulp more moves the ratio
by tens of percent (float32 dq 0.665 -> 1.15 with k 5 is such a move). A real precision
loss moves the typical case of a group, or brings a case close to failing; noise does
neither. The defaults are calibrated on real runs (``python -m reports.gate.calibrate``,
numbers in docs/reports.md).
"""

from __future__ import annotations

import math

from reports.gate.drift_statistics import (
    GroupDrift,
    RatioPair,
    group_drifts,
    median_lower_bound,
)
from reports.gate.findings import (
    Finding,
)
from reports.gate.thresholds import Thresholds
from reports.run_report import markdown as md
from reports.run_report.describe import worst_metric
from reports.run_report.grid import NOT_PASSING, feature_grid
from run_records.results_file import CaseResult
from run_records.run_folder import Run


def what_checked(result: CaseResult) -> str:
    return f"{result.check} · {result.case.case_id}"


def results_by_key(run: Run) -> dict[tuple[str, str, str], CaseResult]:
    return {r.key: r for r in run.results}


def newly_failing(base: Run, candidate: Run) -> list[Finding]:
    cand = results_by_key(candidate)
    return [
        Finding(
            "newly failing",
            r.case.subject,
            what_checked(r),
            r.verdict,
            cand[key].verdict,
            _failure_detail(cand[key]),
            cand[key],
        )
        for key, r in sorted(results_by_key(base).items())
        # A ledger entry never excuses a check that passed in the base: ``known`` counts here.
        if r.verdict == "pass" and key in cand and cand[key].verdict in NOT_PASSING
    ]


def _failure_detail(result: CaseResult) -> str:
    """Short enough for a table cell: the worst tensor's ratio against its k, else the first
    line of the reason (the full story is in that run's report.md); a known failure names its entry."""
    metric = worst_metric(result)
    if metric is not None:
        detail = f"{metric.tensor}: ratio {md.number(metric.ratio)} (k {metric.k:g})"
    else:
        detail = md.truncate(result.reason.strip().splitlines()[0] if result.reason.strip() else "")
    return f"{_known_label(result)}; {detail}" if result.known_issue else detail


def _known_label(result: CaseResult) -> str:
    issue = result.known_issue
    link = issue.get("link", "")
    where = f"[{issue.get('id', '?')}]({link})" if link.startswith("http") else md.code(issue.get("id", "?"))
    return f"known issue {where}"


def fixed(base: Run, candidate: Run) -> list[Finding]:
    """Checks failing (or known) in the base that pass now; a fixed known issue says which entry."""
    cand = results_by_key(candidate)
    return [
        Finding("fixed", r.case.subject, what_checked(r), r.verdict, "pass", "was " + _failure_detail(r), r)
        for key, r in sorted(results_by_key(base).items())
        if r.verdict in NOT_PASSING and key in cand and cand[key].verdict == "pass"
    ]


def fixed_known_issues(base: Run, candidate: Run) -> list[str]:
    """Ledger entries the base reproduced of which the candidate passes every check: remove them?"""
    cand = results_by_key(candidate)
    by_entry: dict[str, list[bool]] = {}
    for key, r in results_by_key(base).items():
        if r.verdict == "known" and key in cand:
            by_entry.setdefault(_known_label(r), []).append(cand[key].verdict == "pass")
    return sorted(label for label, passes in by_entry.items() if all(passes))


def known_issues_unexplained_in_candidate(base: Run, candidate: Run) -> list[tuple[str, int]]:
    """(entry label, checks) of ledger entries the base reproduced whose checks still fail in the
    candidate, but unexplained there: no regression (they failed before), yet the candidate's run is
    red, usually because the entry's range says the candidate's release fixed it."""
    cand = results_by_key(candidate)
    counts: dict[str, int] = {}
    for key, r in results_by_key(base).items():
        if r.verdict == "known" and key in cand and cand[key].verdict in ("fail", "error"):
            counts[_known_label(r)] = counts.get(_known_label(r), 0) + 1
    return sorted(counts.items())


def behaviour_changes(base: Run, candidate: Run) -> list[Finding]:
    """Checks whose observed behaviour (e.g. what a fully masked row returns) differs between the runs."""
    cand = results_by_key(candidate)
    findings = []
    for key, old in sorted(results_by_key(base).items()):
        new = cand.get(key)
        if new is None:
            continue
        for what in sorted(old.observed.keys() & new.observed.keys()):
            if old.observed[what] != new.observed[what]:
                findings.append(
                    Finding(
                        "behaviour change",
                        old.case.subject,
                        f"{what_checked(old)} · {what}",
                        old.observed[what],
                        new.observed[what],
                        f"{old.verdict} → {new.verdict}",
                    )
                )
    return findings


def flaky_results(candidate: Run) -> list[Finding]:
    """Checks that crashed once and ran normally when retried: listed, never counted as regressions."""
    return [
        Finding(
            "flaky",
            r.case.subject,
            what_checked(r),
            "",
            "flaky",
            md.truncate(str(r.details.get("first_attempt", ""))),
        )
        for r in sorted(candidate.results, key=lambda r: r.key)
        if r.verdict == "flaky"
    ]


def ratio_pairs(base: Run, candidate: Run) -> list[RatioPair]:
    """Every ratio of every check that passes in both runs, base value next to candidate's."""
    cand = results_by_key(candidate)
    pairs = []
    for key, old in sorted(results_by_key(base).items()):
        new = cand.get(key)
        if old.verdict != "pass" or new is None or new.verdict != "pass":
            continue
        new_metrics = {m.tensor: m for m in new.metrics}
        for old_metric in old.metrics:
            new_metric = new_metrics.get(old_metric.tensor)
            if new_metric is None:
                continue
            for field, label, k, baseline, error, tolerance in (
                ("ratio", "ratio", old_metric.k, new_metric.baseline_max_abs, "max_abs", "tolerance"),
                # Records written before the mean rule was stored have no k_mean: judge by k.
                (
                    "mean_ratio",
                    "mean ratio",
                    old_metric.k_mean or old_metric.k,
                    new_metric.baseline_mean_abs,
                    "mean_abs",
                    "mean_tolerance",
                ),
            ):
                before, after = getattr(old_metric, field), getattr(new_metric, field)
                pairs.append(
                    RatioPair(
                        old.case.subject,
                        old.case.dtype,
                        old_metric.tensor,
                        label,
                        what_checked(old),
                        before,
                        after,
                        k,
                        baseline == 0,
                        _share(getattr(old_metric, error), getattr(old_metric, tolerance), before, k),
                        _share(getattr(new_metric, error), getattr(new_metric, tolerance), after, k),
                    )
                )
    return pairs


def _share(error: float, tolerance: float | None, ratio: float, k: float) -> float:
    """error / tolerance; records without a stored tolerance fall back to ratio / k (the same
    number when the floor is negligible)."""
    if tolerance is not None and tolerance > 0 and math.isfinite(tolerance):
        return error / tolerance
    return ratio / k if k else math.nan


def drifted(drift: GroupDrift, thresholds: Thresholds) -> bool:
    """The group's typical case got worse by more than ``ratio_drift``, beyond doubt at
    ``drift_confidence``: one case moving a lot, or many moving a little both ways, is not it."""
    if drift.n < thresholds.drift_min_cases:
        return False
    bound = median_lower_bound(drift.changes, thresholds.drift_confidence)
    return bound is not None and bound > 1 + thresholds.ratio_drift


def precision_improvements(pairs: list[RatioPair], thresholds: Thresholds) -> list[str]:
    """Groups (subject, dtype, tensor, statistic) whose typical case got more precise by more than
    ``ratio_drift``, beyond doubt at ``drift_confidence``: the mirror of ``systematic_drifts``, so a
    release that fixes a precision defect shows, not only one that adds one."""
    notes = []
    for drift in group_drifts(pairs):
        if drift.n < thresholds.drift_min_cases:
            continue
        inverse = sorted(1 / change for change in drift.changes)
        bound = median_lower_bound(inverse, thresholds.drift_confidence)
        if bound is None or bound <= 1 + thresholds.ratio_drift:
            continue
        subject, dtype, tensor, statistic = drift.group
        notes.append(
            f"Precision improved: {subject} · {dtype} · {tensor} {statistic} · "
            f"{md.plural(drift.n, 'case')}: median {md.number(drift.base_median)} → "
            f"{md.number(drift.candidate_median)} (typical case ×{drift.change:.2f}, "
            f"≤ ×{1 / bound:.2f} at {thresholds.drift_confidence:.0%})."
        )
    return notes


def systematic_drifts(pairs: list[RatioPair], thresholds: Thresholds) -> list[Finding]:
    """Groups whose typical case got worse by more than ``ratio_drift``."""
    findings = []
    for drift in group_drifts(pairs):
        if not drifted(drift, thresholds):
            continue
        bound = median_lower_bound(drift.changes, thresholds.drift_confidence) or 0.0
        subject, dtype, tensor, statistic = drift.group
        findings.append(
            Finding(
                "ratio drift",
                subject,
                f"{dtype} · {tensor} {statistic} · {md.plural(drift.n, 'case')}",
                f"median {md.number(drift.base_median)} · p90 {md.number(drift.base_p90)}",
                f"median {md.number(drift.candidate_median)} · p90 {md.number(drift.candidate_p90)}",
                f"typical case ×{drift.change:.2f} (≥ ×{bound:.2f} at {thresholds.drift_confidence:.0%})",
            )
        )
    return findings


def jumped(pair: RatioPair, thresholds: Thresholds) -> bool:
    """A finite ratio that became non-finite, or one that was far from its tolerance and is
    now close to it."""
    before, after = pair.before, pair.after
    if math.isnan(after):
        return not math.isnan(before)
    if math.isinf(after):
        # Against an exact baseline a passing check's ratio flips between 0 and inf as the
        # subject's error flips between 0 and an ulp (seen across releases: pallas_gpu dq of a
        # one-key case); that says nothing about precision.
        return math.isfinite(before) and not pair.exact_baseline
    if not math.isfinite(before):
        return False  # nothing to compare against (e.g. a zero baseline error in the base)
    return pair.before_share < thresholds.well_below and pair.after_share > thresholds.near_tolerance


def case_jumps(pairs: list[RatioPair], thresholds: Thresholds) -> list[Finding]:
    return [
        Finding(
            "ratio jump",
            pair.subject,
            f"{pair.what} · {pair.tensor} {pair.statistic}",
            md.number(pair.before),
            md.number(pair.after),
            "new non-finite ratio"
            if not math.isfinite(pair.after)
            else f"{pair.before_share:.0%} → {pair.after_share:.0%} of its tolerance (k {pair.k:g} + floor)",
        )
        for pair in pairs
        if jumped(pair, thresholds)
    ]


def ratio_drifts(pairs: list[RatioPair], thresholds: Thresholds) -> list[Finding]:
    """Error-ratio regressions on checks both runs pass (``ratio_pairs``): systematic drifts,
    then single jumps."""
    return systematic_drifts(pairs, thresholds) + case_jumps(pairs, thresholds)


def lost_capabilities(base: Run, candidate: Run) -> list[Finding]:
    """Subjects that ran in the base but not now; grid columns the base passed that are gone now."""
    findings = []
    old_grid, new_grid = feature_grid(base.results), feature_grid(candidate.results)
    ran_before = {r.case.subject for r in base.results if r.verdict != "unavailable"}
    ran_now = {r.case.subject for r in candidate.results if r.verdict != "unavailable"}
    for subject in sorted(ran_before - ran_now):
        reasons = {r.reason for r in candidate.results if r.case.subject == subject and r.reason}
        if subject in new_grid.subjects:
            now, detail = "unavailable", "; ".join(sorted(reasons))
        elif candidate.complete:
            now, detail = "absent", "the candidate run has no result for this subject"
        else:
            continue  # an incomplete run may not have reached the subject yet
        findings.append(Finding("lost subject", subject, "availability", "available", now, detail))
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
    cand = results_by_key(candidate)
    for key, old in sorted(results_by_key(base).items()):
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
                    what_checked(old),
                    "pass",
                    new.verdict,
                    md.truncate(new.reason),
                )
            )
    return findings

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

import dataclasses
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from reports.records.benchmarks_file import Benchmark, read_benchmarks
from reports.records.environment import one_line
from reports.records.results_file import CaseResult, ResultsFileError
from reports.records.run_folder import Run, load_run
from reports.run_report import markdown as md
from reports.run_report.describe import worst_metric
from reports.run_report.grid import NOT_PASSING, feature_grid, not_checked_reasons, nothing_checked
from reports.run_report.grouping import cause_count_line, group_causes
from reports.run_report.render import repro_path

EXIT_PASS, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
MAX_ROWS = 50


@dataclasses.dataclass(frozen=True)
class Thresholds:
    # Systematic drift: the median per-case change of a group's ratios is above +50% ...
    ratio_drift: float = 0.5
    # ... at this confidence (a distribution-free sign-test bound on that median, so a group
    # of noisy cases does not fail by chance) ...
    drift_confidence: float = 0.95
    # ... over at least this many cases passing in both; smaller groups are left to the
    # single-case rule (at 95% the bound needs 5 cases anyway: 0.5**5 < 5%).
    drift_min_cases: int = 5
    # A single case fails the gate when its error rises above this share of its tolerance ...
    near_tolerance: float = 0.7
    # ... from below this share: it was far from failing and now nearly fails.
    well_below: float = 0.25
    max_slowdown: float = 0.25  # median time per call up by more than 25% (shared CI machines are noisy)
    max_memory_growth: float = 0.10  # peak memory up by more than 10%
    allow_incomplete: bool = False
    # What a subject does where the semantics are open (CaseResult.observed) changed: fails the
    # gate unless allowed, since downstream code depends on what a kernel really does.
    allow_behaviour_change: bool = False

    def __post_init__(self) -> None:
        for name in ("ratio_drift", "near_tolerance", "well_below", "max_slowdown", "max_memory_growth"):
            value = getattr(self, name)
            if not (_is_number(value) and math.isfinite(value) and value >= 0):
                raise ValueError(f"threshold {name} must be a finite number >= 0, got {value!r}")
        if not (_is_number(self.drift_confidence) and 0.5 <= self.drift_confidence < 1):
            raise ValueError(  # 0.5 judges the plain sample median; 1 would need infinitely many cases
                f"threshold drift_confidence must be a number in [0.5, 1), got {self.drift_confidence!r}"
            )
        cases = self.drift_min_cases
        if not (_is_number(cases) and cases == int(cases) and cases >= 1):
            raise ValueError(f"threshold drift_min_cases must be a whole number >= 1, got {cases!r}")
        if self.well_below > self.near_tolerance:
            raise ValueError(
                f"threshold well_below ({self.well_below:g}) must not exceed near_tolerance "
                f"({self.near_tolerance:g}): a case must come from further below its tolerance "
                "than it ends up"
            )

    def summary_line(self) -> str:
        return (
            f"ratio drift: a group's median case > +{self.ratio_drift:.0%} "
            f"at {self.drift_confidence:.0%} confidence (groups of ≥ {self.drift_min_cases:g} cases) · "
            f"one case: from < {self.well_below:.0%} to > {self.near_tolerance:.0%} of its tolerance, "
            "or non-finite · "
            f"slowdown > {self.max_slowdown:.0%} · peak memory > +{self.max_memory_growth:.0%} · "
            f"incomplete runs {'allowed' if self.allow_incomplete else 'fail the gate'} · "
            f"behaviour changes {'allowed' if self.allow_behaviour_change else 'fail the gate'}"
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Finding:
    rule: str  # one of RULES, or "fixed"
    subject: str
    what: str  # the check and case, the feature, or the benchmark
    base: str
    candidate: str
    detail: str = ""
    # The failing check behind a "newly failing" or "fixed" finding (the candidate's, the base's):
    # how render_gate groups such findings by cause (reports.run_report.grouping). Not part of equality.
    result: CaseResult | None = dataclasses.field(default=None, compare=False, repr=False)


RULES = {
    "incomplete": "Incomplete input",
    "newly failing": "Newly failing",
    "ratio drift": "Error-ratio drift (systematic)",
    "ratio jump": "Error ratio close to tolerance",
    "behaviour change": "Behaviour changes (where the semantics are open)",
    "lost subject": "Lost subjects (API break)",
    "lost capability": "Lost capabilities (API break)",
    "slower": "Slower",
    "more memory": "More memory",
}
# Rules whose findings are failing checks: listed and counted by cause, one row per finding
# (the same case template across checks and dtypes, as in report.md); each check still counts
# for the verdict.
GROUPED_RULES = ("newly failing", "fixed")


@dataclasses.dataclass(frozen=True)
class GateResult:
    base: Run
    candidate: Run
    thresholds: Thresholds
    regressions: tuple[Finding, ...]
    fixed: tuple[Finding, ...]
    notes: tuple[str, ...]
    compared: int  # checks present in both runs
    flaky: tuple[Finding, ...] = ()  # crashed once in the candidate, then ran normally: never a regression

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
            cand[key],
        )
        for key, r in sorted(_index(base).items())
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
    cand = _index(candidate)
    return [
        Finding("fixed", r.case.subject, _what(r), r.verdict, "pass", "was " + _failure_detail(r), r)
        for key, r in sorted(_index(base).items())
        if r.verdict in NOT_PASSING and key in cand and cand[key].verdict == "pass"
    ]


def fixed_known_issues(base: Run, candidate: Run) -> list[str]:
    """Ledger entries the base reproduced of which the candidate passes every check: remove them?"""
    cand = _index(candidate)
    by_entry: dict[str, list[bool]] = {}
    for key, r in _index(base).items():
        if r.verdict == "known" and key in cand:
            by_entry.setdefault(_known_label(r), []).append(cand[key].verdict == "pass")
    return sorted(label for label, passes in by_entry.items() if all(passes))


def behaviour_changes(base: Run, candidate: Run) -> list[Finding]:
    """Checks whose observed behaviour (e.g. what a fully masked row returns) differs between the runs."""
    cand = _index(candidate)
    findings = []
    for key, old in sorted(_index(base).items()):
        new = cand.get(key)
        if new is None:
            continue
        for what in sorted(old.observed.keys() & new.observed.keys()):
            if old.observed[what] != new.observed[what]:
                findings.append(
                    Finding(
                        "behaviour change",
                        old.case.subject,
                        f"{_what(old)} · {what}",
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
            _what(r),
            "",
            "flaky",
            md.truncate(str(r.details.get("first_attempt", ""))),
        )
        for r in sorted(candidate.results, key=lambda r: r.key)
        if r.verdict == "flaky"
    ]


@dataclasses.dataclass(frozen=True)
class RatioPair:
    """One error ratio (max-abs or mean-abs, of one tensor) of a check both runs pass."""

    subject: str
    dtype: str
    tensor: str
    statistic: str  # "ratio" (max-abs) or "mean ratio"
    what: str  # the check and case
    before: float
    after: float
    k: float  # the tolerance multiplier this ratio is judged against
    # The candidate's baseline error is zero: its ratio is 0 (exact too) or inf (any error at
    # all), whatever the subject's error; the check's floor judges such a case, not the ratio.
    exact_baseline: bool = False
    # The share of its tolerance (k x baseline + floor) the error uses on each side: what the
    # check passes on. Where the floor dominates, the ratio against a near-exact baseline can
    # swing by 1e9 while the error stays an ulp; the share does not.
    before_share: float = math.nan
    after_share: float = math.nan

    @property
    def group(self) -> tuple[str, str, str, str]:
        return (self.subject, self.dtype, self.tensor, self.statistic)


def ratio_pairs(base: Run, candidate: Run) -> list[RatioPair]:
    """Every ratio of every check that passes in both runs, base value next to candidate's."""
    cand = _index(candidate)
    pairs = []
    for key, old in sorted(_index(base).items()):
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
                        _what(old),
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


@dataclasses.dataclass(frozen=True)
class GroupDrift:
    """How one group's ratios moved: the paired per-case change and the distribution on each side."""

    group: tuple[str, str, str, str]  # subject, dtype, tensor, statistic
    n: int  # cases with a finite, non-zero ratio on both sides
    change: float  # median of after/before over the cases (geometric: a median in log space)
    changes: tuple[float, ...]  # every case's after/before, ascending
    base_median: float
    base_p90: float
    candidate_median: float
    candidate_p90: float


def comparable(pair: RatioPair) -> bool:
    """A relative change needs a finite, non-zero ratio on both sides (a zero ratio is an exact
    result or an exact baseline; a jump from it is the single-case rule's)."""
    return all(math.isfinite(x) and x > 0 for x in (pair.before, pair.after))


def group_drifts(pairs: list[RatioPair]) -> list[GroupDrift]:
    """Per group, the median per-case change and both runs' median and p90."""
    groups: dict[tuple[str, str, str, str], list[RatioPair]] = {}
    for pair in pairs:
        if comparable(pair):
            groups.setdefault(pair.group, []).append(pair)
    return [_group_drift(group, members) for group, members in sorted(groups.items())]


def _group_drift(group: tuple[str, str, str, str], members: list[RatioPair]) -> GroupDrift:
    # Paired changes, not a change of medians: each case is compared with itself, so the
    # spread of ratios across shapes (0.05 to 1.4 in one group) does not hide a shift.
    change = math.exp(statistics.median(math.log(p.after / p.before) for p in members))
    before = [p.before for p in members]
    after = [p.after for p in members]
    return GroupDrift(
        group,
        len(members),
        change,
        tuple(sorted(p.after / p.before for p in members)),
        statistics.median(before),
        quantile(before, 0.9),
        statistics.median(after),
        quantile(after, 0.9),
    )


def quantile(values: list[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (NumPy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median_lower_bound(ascending: Sequence[float], confidence: float) -> float | None:
    """A lower confidence bound for the median of the distribution these values come from:
    the r-th smallest value, r the largest rank with P(Binomial(n, 1/2) < r) <= 1 - confidence
    (the sign test; it assumes nothing about the shape of the noise). None when n is too small
    for any rank to reach that confidence."""
    n, alpha = len(ascending), 1 - confidence
    below, rank = 0.0, 0  # below: P(Binomial(n, 1/2) <= rank), once rank is counted
    while rank < n:
        below += math.comb(n, rank) / 2**n
        if below > alpha:
            break
        rank += 1
    return ascending[rank - 1] if rank else None


def drifted(drift: GroupDrift, thresholds: Thresholds) -> bool:
    """The group's typical case got worse by more than ``ratio_drift``, beyond doubt at
    ``drift_confidence``: one case moving a lot, or many moving a little both ways, is not it."""
    if drift.n < thresholds.drift_min_cases:
        return False
    bound = median_lower_bound(drift.changes, thresholds.drift_confidence)
    return bound is not None and bound > 1 + thresholds.ratio_drift


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


def ratio_drifts(base: Run, candidate: Run, thresholds: Thresholds) -> list[Finding]:
    """Error-ratio regressions on checks both runs pass: systematic drifts, then single jumps."""
    pairs = ratio_pairs(base, candidate)
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
    for label in fixed_known_issues(base, candidate):
        notes.append(f"The candidate fixes {label}: every check it explained in the base passes now.")
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
    if result.passed:
        verdict = (
            f"## ✅ Upgrade gate: PASS — {cand.label} has no regression against {base.label} "
            f"({md.plural(result.compared, 'check')} compared, {len(result.fixed)} fixed)"
        )
    else:
        count = sum(n for n, _ in tallies.values())
        verdict = (
            f"## ❌ Upgrade gate: FAIL — {md.plural(count, 'regression')} in "
            f"{cand.label} against {base.label} ({md.plural(result.compared, 'check')} compared)"
        )
    parts = [verdict, "", _run_line("Base", base), "", _run_line("Candidate", cand), ""]
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
        "`--ratio-drift`, `--drift-confidence`, `--drift-min-cases`, `--near-tolerance`, `--well-below`, "
        "`--max-slowdown`, `--max-memory-growth`, "
        "`--allow-incomplete`, `--allow-behaviour-change`.</sub>"
    )
    return "\n".join(parts) + "\n"

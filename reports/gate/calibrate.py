"""Calibrate the gate's error-ratio rules on real runs: ``python -m reports.gate.calibrate ROOT``.

ROOT holds report folders ``jax-<version>/`` of the same profile and subjects (e.g.
``nox -k conformance -- --impl all``). For every pair of consecutive versions (and the
oldest against the newest) it prints:

* the gate's verdict with the old per-case drift rule (any ratio +50% and above 1.0)
  and with the current rules, and what each flagged;
* how much healthy ratios move between releases: quantiles of the per-case change,
  the largest group median change, and how close to k the cases far from it came;
* synthetic regressions: the candidate with one subject's errors scaled by a factor
  on every check that stays inside its tolerance, written as a real report folder and
  gated against the base. At x4 the gate must fail.

Every pair of real runs is a healthy upgrade unless a real change shows; anything the
current rules flag there needs a look. Reads only; the scaled folders go to a
temporary folder (``--keep DIR`` keeps them).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from reports.gate.comparison import compare
from reports.gate.drift_statistics import RatioPair, comparable, group_drifts, median_lower_bound, quantile
from reports.gate.findings import Finding
from reports.gate.rules import ratio_pairs
from reports.gate.thresholds import Thresholds
from reports.run_report import markdown as md
from run_records.results_file import CaseResult, ResultsWriter, write_json_atomic, write_text_atomic
from run_records.run_folder import Run, load_run

FACTORS = (1.25, 1.5, 2.0, 3.0, 4.0)
REGRESSION_FACTOR = 4.0  # the synthetic regression the gate must fail
_VERSION = re.compile(r"^jax-(\d+(?:\.\d+)*)$")


def version_key(folder: Path) -> tuple[int, ...]:
    match = _VERSION.match(folder.name)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def discover(root: Path) -> list[Path]:
    """``jax-<version>`` folders holding results.jsonl, oldest version first."""
    folders = [p for p in root.iterdir() if version_key(p) and (p / "results.jsonl").exists()]
    return sorted(folders, key=version_key)


def legacy_drifted(pair: RatioPair, drift: float = 0.5, floor: float = 1.0) -> bool:
    """The rule this module replaced: one case's ratio up more than ``drift`` and above ``floor``."""
    before, after = pair.before, pair.after
    if math.isnan(after) and not math.isnan(before):
        return True
    if not math.isfinite(before) or math.isnan(after):
        return False
    if math.isinf(after):
        return True
    return after > floor and after > before * (1 + drift)


@dataclasses.dataclass(frozen=True)
class PairVerdict:
    base: str
    candidate: str
    old_rule: tuple[RatioPair, ...]  # what the old drift rule flagged
    new_rule: tuple[Finding, ...]  # what the current drift rules flag
    other: tuple[Finding, ...]  # regressions of the other rules (newly failing, lost, ...)


def judge(base: Run, candidate: Run, thresholds: Thresholds) -> PairVerdict:
    result = compare(base, candidate, thresholds)
    drift_rules = ("ratio drift", "ratio jump")
    return PairVerdict(
        base.jax_version,
        candidate.jax_version,
        tuple(p for p in ratio_pairs(base, candidate) if legacy_drifted(p)),
        tuple(f for f in result.regressions if f.rule in drift_rules),
        tuple(f for f in result.regressions if f.rule not in drift_rules),
    )


def scale_subject(results: Iterable[CaseResult], subject: str, factor: float) -> list[CaseResult]:
    """A precision regression inside tolerance: ``subject``'s errors times ``factor`` on every
    passing check's tensor where the scaled ratios stay within k (max) and k_mean (mean), so
    no check starts failing and only the drift rules can see it."""
    scaled = []
    for result in results:
        if result.case.subject != subject or result.verdict != "pass":
            scaled.append(result)
            continue
        metrics = []
        for m in result.metrics:
            k_mean = m.k_mean or m.k
            fits = all(math.isfinite(x) for x in (m.ratio, m.mean_ratio))
            if fits and m.ratio * factor <= m.k and m.mean_ratio * factor <= k_mean:
                m = dataclasses.replace(
                    m,
                    max_abs=m.max_abs * factor,
                    mean_abs=m.mean_abs * factor,
                    ratio=m.ratio * factor,
                    mean_ratio=m.mean_ratio * factor,
                )
            metrics.append(m)
        scaled.append(dataclasses.replace(result, metrics=tuple(metrics)))
    return scaled


def write_like(run: Run, results: Iterable[CaseResult], folder: Path) -> Path:
    """A report folder with ``run``'s header and summary and these results."""
    header = {k: v for k, v in run.results_file.header.items() if k not in ("kind", "schema", "resumed")}
    writer = ResultsWriter(folder, header)
    for result in results:
        writer.append(result)
    footer = run.results_file.footer or {}
    writer.finish({k: v for k, v in footer.items() if k not in ("kind", "schema")})
    if run.summary is not None:
        write_json_atomic(folder / "summary.json", run.summary)
    return folder


def subjects_with_ratios(run: Run) -> list[str]:
    return sorted({r.case.subject for r in run.results if r.verdict == "pass" and r.metrics})


DRIFT_RULES = ("ratio drift", "ratio jump")


def drift_findings(base: Run, candidate: Run, thresholds: Thresholds) -> list[Finding]:
    return [f for f in compare(base, candidate, thresholds).regressions if f.rule in DRIFT_RULES]


# -- what healthy upgrades look like --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Healthy:
    """How ratios moved over a set of real pairs of runs (none of them a precision regression)."""

    pairs: int
    per_case: dict[str, dict[str, float]]  # statistic -> quantiles of after/before
    group_median_max: float  # largest median per-case change of a judged group
    group_bound_max: float  # largest sign-test lower bound of it (what the rule compares)
    from_below_max: float  # largest share of its tolerance reached by a case that was below well_below
    group_worst: str  # where group_median_max was seen


def change_quantiles(pairs: Sequence[RatioPair], statistic: str) -> dict[str, float]:
    """Quantiles of after/before over comparable pairs of one statistic (both directions kept:
    a healthy change is as often down as up)."""
    changes = [p.after / p.before for p in pairs if p.statistic == statistic and comparable(p)]
    if not changes:
        return {}
    return {
        "n": len(changes),
        "p50": quantile(changes, 0.5),
        "p90": quantile(changes, 0.9),
        "p99": quantile(changes, 0.99),
        "max": max(changes),
    }


def healthy(couples: Sequence[tuple[Run, Run]], thresholds: Thresholds) -> Healthy:
    pairs: list[RatioPair] = []
    medians: list[tuple[float, str]] = [(1.0, "—")]
    bounds = [1.0]
    for base, candidate in couples:
        found = ratio_pairs(base, candidate)
        pairs += found
        # Groups per pair of runs: pooling two pairs' cases would mix two upgrades.
        for drift in group_drifts(found):
            if drift.n >= thresholds.drift_min_cases:
                where = (
                    f"{' · '.join(drift.group)}, {base.jax_version} → {candidate.jax_version}, n={drift.n}"
                )
                medians.append((drift.change, where))
                bounds.append(median_lower_bound(drift.changes, thresholds.drift_confidence) or 0.0)
    from_below = [
        p.after_share
        for p in pairs
        if p.before_share < thresholds.well_below and math.isfinite(p.after_share)
    ]
    worst = max(medians)
    return Healthy(
        len(couples),
        {s: change_quantiles(pairs, s) for s in ("ratio", "mean ratio")},
        worst[0],
        max(bounds),
        max(from_below, default=0.0),
        worst[1],
    )


# -- the printed tables -----------------------------------------------------------------------


def _old_item(p: RatioPair) -> str:
    return f"{p.subject} {p.dtype} {p.tensor} {p.statistic} {md.number(p.before)}→{md.number(p.after)}"


def _listing(items: Sequence[str], limit: int) -> str:
    more = len(items) - limit
    return "; ".join(items[:limit]) + (f"; +{more} more" if more > 0 else "") if items else "—"


def pair_table(verdicts: Sequence[PairVerdict]) -> str:
    rows = []
    for v in verdicts:
        other: dict[str, int] = {}
        for f in v.other:
            other[f.rule] = other.get(f.rule, 0) + 1
        rows.append(
            [
                f"{v.base} → {v.candidate}",
                f"FAIL ({len(v.old_rule)})" if v.old_rule else "pass",
                f"FAIL ({len(v.new_rule)})" if v.new_rule else "pass",
                _listing([_old_item(p) for p in v.old_rule], 3),
                _listing(
                    [f"{f.subject} {f.what}: {f.base} → {f.candidate} ({f.detail})" for f in v.new_rule], 3
                ),
                ", ".join(f"{rule} {n}" for rule, n in other.items()) or "—",
            ]
        )
    return md.table(
        ["pair", "old drift rule", "new drift rules", "old rule flagged", "new rules flagged", "other rules"],
        rows,
    )


def healthy_table(samples: Sequence[tuple[str, Healthy]], thresholds: Thresholds) -> str:
    rows = []
    for name, h in samples:
        for statistic, q in h.per_case.items():
            if q:
                rows.append(
                    [
                        f"{name}: per case, {statistic}",
                        q["n"],
                        *(f"×{q[x]:.3g}" for x in ("p50", "p90", "p99", "max")),
                    ]
                )
    table = md.table(["after / before", "n", "p50", "p90", "p99", "max"], rows)
    lines = [
        f"- {name} ({h.pairs} pairs): largest group median change ×{h.group_median_max:.3g} "
        f"({h.group_worst}); largest {thresholds.drift_confidence:.0%} lower bound of a group median "
        f"×{h.group_bound_max:.3g} (rule: > ×{1 + thresholds.ratio_drift:g}); largest share of its tolerance "
        f"reached from below {thresholds.well_below:.0%}: {h.from_below_max:.3f} "
        f"(rule: > {thresholds.near_tolerance:g})"
        for name, h in samples
    ]
    return "\n".join([table, "", *lines])


def _drift_cell(findings: Sequence[Finding]) -> str:
    groups = sum(f.rule == "ratio drift" for f in findings)
    cases = sum(f.rule == "ratio jump" for f in findings)
    return f"FAIL ({groups} groups, {cases} cases)" if findings else "pass"


def self_regressions(
    runs: Sequence[Run], subjects: Sequence[str], thresholds: Thresholds, out: Path
) -> tuple[str, bool]:
    """Each run against a copy of itself with one subject's errors ×4: the cleanest regression."""
    rows, ok = [], True
    for run in runs:
        row: list[object] = [run.jax_version]
        for subject in subjects:
            folder = out / f"self-{run.jax_version}-{subject}" / f"jax-{run.jax_version}"
            scaled = scale_subject(run.results, subject, REGRESSION_FACTOR)
            found = drift_findings(run, load_run(write_like(run, scaled, folder)), thresholds)
            ok &= bool(found)
            row.append(_drift_cell(found))
        rows.append(row)
    return md.table(["run", *subjects], rows), ok


def sweep(
    couples: Sequence[tuple[Run, Run]],
    subject: str,
    factors: Sequence[float],
    thresholds: Thresholds,
    out: Path,
) -> tuple[str, bool]:
    """Real pairs with the candidate's ``subject`` scaled: a regression on top of real noise."""
    rows, ok = [], True
    for base, candidate in couples:
        unscaled = len(drift_findings(base, candidate, thresholds))
        row: list[object] = [f"{base.jax_version} → {candidate.jax_version}"]
        for factor in factors:
            name = f"{base.jax_version}_to_{candidate.jax_version}-{subject}-x{factor:g}"
            scaled = scale_subject(candidate.results, subject, factor)
            folder = write_like(candidate, scaled, out / name / f"jax-{candidate.jax_version}")
            found = drift_findings(base, load_run(folder), thresholds)
            if factor >= REGRESSION_FACTOR:
                ok &= len(found) > unscaled
            row.append(_drift_cell(found))
        rows.append(row)
    return md.table(["base → scaled candidate", *(f"×{f:g}" for f in factors)], rows), ok


def calibrate(
    root: Path, thresholds: Thresholds, out: Path, primary: str, factors: Sequence[float]
) -> tuple[str, bool]:
    """The report, and whether the current rules behaved: no real pair flagged by a drift rule,
    and every ×4 synthetic regression flagged."""
    runs = [load_run(folder) for folder in discover(root)]
    if len(runs) < 2:
        raise SystemExit(f"error: {root}: need at least two jax-<version>/ folders, found {len(runs)}")
    adjacent = list(zip(runs, runs[1:], strict=False))
    couples = adjacent + ([(runs[0], runs[-1])] if len(runs) > 2 else [])
    everything = list(itertools.combinations(runs, 2))
    verdicts = [judge(b, c, thresholds) for b, c in couples]
    subjects = sorted(
        {r.case.subject for run in runs for r in run.results if r.verdict == "pass" and r.metrics}
    )
    self_table, self_ok = self_regressions(runs, subjects, thresholds, out)
    sweep_table, sweep_ok = sweep(adjacent, primary, factors, thresholds, out)
    gate_old = sum(bool(v.old_rule or v.other) for v in verdicts)
    gate_new = sum(bool(v.new_rule or v.other) for v in verdicts)
    parts = [
        f"# Gate calibration over {len(runs)} runs in {root}",
        "",
        f"Thresholds: {thresholds.summary_line()}.",
        "",
        "## Real pairs (base → candidate)",
        "",
        pair_table(verdicts),
        "",
        f"Drift rules alone: the old rule fails {sum(bool(v.old_rule) for v in verdicts)} of "
        f"{len(verdicts)} pairs, the new rules {sum(bool(v.new_rule) for v in verdicts)}. Whole gate "
        f"(other rules unchanged): {gate_old} with the old rule, {gate_new} with the new.",
        "",
        "## Healthy changes",
        "",
        healthy_table(
            [
                ("consecutive versions", healthy(adjacent, thresholds)),
                ("every pair", healthy(everything, thresholds)),
            ],
            thresholds,
        ),
        "",
        f"## Synthetic regression: each run against itself with one subject's errors ×{REGRESSION_FACTOR:g}",
        "",
        "Every passing check's tensor whose scaled ratios stay within k and k_mean; "
        "verdict of the drift rules (must FAIL).",
        "",
        self_table,
        "",
        f"## Synthetic regression on real noise: {primary} scaled in the candidate of each consecutive pair",
        "",
        f"Verdict of the drift rules (at ×{REGRESSION_FACTOR:g} they must flag more than on the real pair).",
        "",
        sweep_table,
        "",
    ]
    ok = not any(v.new_rule for v in verdicts) and self_ok and sweep_ok
    return "\n".join(parts), ok


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python -m reports.gate.calibrate", description=__doc__.split("\n")[0])
    cli.add_argument("root", type=Path, help="folder holding jax-<version>/ report folders")
    cli.add_argument(
        "--primary", default="tpu_flash", help="subject scaled on real pairs (default %(default)s)"
    )
    cli.add_argument(
        "--factors", default=",".join(f"{f:g}" for f in FACTORS), help="scale factors, comma-separated"
    )
    cli.add_argument("--keep", type=Path, default=None, help="keep the scaled folders here")
    cli.add_argument("--output", type=Path, default=None, help="also write the report here")
    args = cli.parse_args(argv)
    factors = tuple(float(x) for x in args.factors.split(","))
    with tempfile.TemporaryDirectory(prefix="gate-calibration-") as scratch:
        text, ok = calibrate(args.root, Thresholds(), args.keep or Path(scratch), args.primary, factors)
    if args.output:
        write_text_atomic(args.output, text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

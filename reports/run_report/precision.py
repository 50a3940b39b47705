"""The precision grade: per subject, dtype and tensor, how the subject's error compares with the
careful baseline's (``TensorMetrics.ratio``, error / baseline error) over every judged check.

A pass says the error is within k times the baseline's; the grade says where inside (or past)
that band the subject sits, so a release that makes a kernel 3x less precise, or fixes a precision
defect, shows even while every check passes. Judgements no answer could fail (``weak``) and exact
baselines (a ratio of 0 or inf) say nothing of precision and are left out.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable

from reports.run_report import markdown as md
from run_records.results_file import CaseResult


@dataclasses.dataclass(frozen=True)
class Grade:
    """One (subject, dtype, tensor): the typical and worst ratio of its max-abs error to the
    baseline's, over ``n`` judged checks."""

    subject: str
    dtype: str
    tensor: str
    n: int
    median: float
    worst: float


def grades(results: Iterable[CaseResult]) -> list[Grade]:
    """Every group's grade, in subject, dtype, tensor order."""
    ratios: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for result in results:
        if result.verdict not in ("pass", "fail", "known"):
            continue
        for metric in result.metrics:
            if metric.weak or not (math.isfinite(metric.ratio) and metric.ratio > 0):
                continue
            ratios[(result.case.subject, result.case.dtype, metric.tensor)].append(metric.ratio)
    return [
        Grade(*group, len(values), statistics.median(values), max(values))
        for group, values in sorted(ratios.items())
    ]


def precision_section(results: Iterable[CaseResult]) -> str | None:
    """The folded table's body: one row per (subject, dtype, tensor); None when nothing was judged."""
    rows = [
        (g.subject, g.dtype, g.tensor, g.n, md.number(g.median), md.number(g.worst)) for g in grades(results)
    ]
    if not rows:
        return None
    lead = (
        "Error / the careful baseline's error (max-abs), over every judged check: below 1, more "
        "precise than plain attention in the dtype; the tolerance allows k (3 for out and lse, 5 for "
        "gradients). The gate reports a change of the typical ratio between two runs, either way."
    )
    return (
        lead + "\n\n" + md.table(("subject", "dtype", "tensor", "checks", "median", "worst"), rows, "lllrrr")
    )

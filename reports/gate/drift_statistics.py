"""The statistics behind the drift rules: paired error ratios, per-group changes, quantiles and
a sign-test lower bound on a median. Pure, standard library only."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence


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

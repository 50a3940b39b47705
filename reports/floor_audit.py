"""The floor sweep: where a tolerance's floor, not the careful baseline's error, decides a pass.

A tensor's tolerance is ``k x baseline + floor`` (``conformance/judge/tolerance.py``). The baseline
is a careful kernel of the subject's dtype, and its error on the case is the yardstick. The floor
is the rounding no careful kernel can avoid, there for where the baseline happens to be exact. A
floor far above ``k x baseline`` lets a subject be that much worse than a careful kernel and
pass, so each such place needs a reason (docs/tolerances.md, "The floor sweep").

``python -m reports floor-audit DIR [--over 10]`` reads a run's results.jsonl and prints, per
subject, dtype and tensor, the passing judgement whose floor is the furthest above ``k x
baseline``, in one of three classes:

* ``baseline exact``: the baseline's error is zero (integer inputs, a row that sees one key, a
  single key), so the floor is the whole tolerance;
* ``cancellation``: a gradient that is zero next to the terms that cancel to give it; its floor is
  taken at those terms' size (``baseline.BaselineGrads.cancellation``);
* ``over``: a floor more than ``--over`` times ``k x baseline`` otherwise.

The weak judgements (a trivially wrong answer passes) are not listed: they are not passes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path

from run_records.results_file import CaseResult, read_results

GRADIENTS = ("dq", "dk", "dv", "dbias", "dsinks")


@dataclasses.dataclass(frozen=True)
class FloorRow:
    """The passing judgement of one (subject, dtype, tensor) whose floor is furthest above k x baseline."""

    subject: str
    dtype: str
    tensor: str
    kind: str  # "baseline exact", "cancellation" or "over"
    ratio: float  # floor / (k x baseline); inf where the baseline is exact
    floor: float
    k_baseline: float
    error: float  # the subject's max-abs error there
    worst_reference: float
    case_id: str
    check: str


def _kind(tensor: str, floor: float, k_baseline: float, worst_reference: float) -> str:
    if k_baseline == 0:
        return "baseline exact"
    # A gradient whose value is far below its floor: the floor came from the cancelling terms.
    if tensor in GRADIENTS and abs(worst_reference) < floor:
        return "cancellation"
    return "over"


def floor_rows(results: Iterable[CaseResult], over: float = 10.0) -> list[FloorRow]:
    """Per (subject, dtype, tensor), the passing, non-weak judgement with the largest floor / (k x
    baseline), where that is more than ``over``; the largest first."""
    worst: dict[tuple[str, str, str], FloorRow] = {}
    for result in results:
        if result.verdict != "pass":
            continue
        for m in result.metrics:
            if not m.passed or m.weak or not math.isfinite(m.floor) or m.floor <= 0:
                continue
            k_baseline = m.k * m.baseline_max_abs
            ratio = math.inf if k_baseline == 0 else m.floor / k_baseline
            if ratio <= over:
                continue
            key = (result.case.subject, result.case.dtype, m.tensor)
            if key in worst and worst[key].ratio >= ratio:
                continue
            worst[key] = FloorRow(
                *key,
                _kind(m.tensor, m.floor, k_baseline, m.worst_reference),
                ratio,
                m.floor,
                k_baseline,
                m.max_abs,
                m.worst_reference,
                result.case.case_id,
                result.check,
            )
    return sorted(worst.values(), key=lambda r: (-r.ratio, r.subject, r.dtype, r.tensor))


def table(rows: list[FloorRow], judged: int, over: float) -> str:
    """The rows as Markdown, with a count line per class."""
    counts = {
        kind: sum(1 for r in rows if r.kind == kind) for kind in ("baseline exact", "cancellation", "over")
    }
    lines = [
        f"{len(rows)} (subject, dtype, tensor) groups of {judged} passing judgements have a floor more than "
        f"{over:g} x k x baseline: " + ", ".join(f"{n} {kind}" for kind, n in counts.items()),
        "",
        "| subject | dtype | tensor | class | floor / (k x baseline) | floor | k x baseline | error | case "
        "| check |",
        "| :-- | :-- | :-- | :-- | --: | --: | --: | --: | :-- | :-- |",
    ]
    for r in rows:
        ratio = "exact baseline" if math.isinf(r.ratio) else f"{r.ratio:.3g}"
        lines.append(
            f"| {r.subject} | {r.dtype} | {r.tensor} | {r.kind} | {ratio} | {r.floor:.3g} | "
            f"{r.k_baseline:.3g} | {r.error:.3g} | `{r.case_id}` | {r.check} |"
        )
    return "\n".join(lines)


def audit(folder: Path, over: float = 10.0) -> str:
    """The floor sweep of one run folder (or results.jsonl), as Markdown."""
    results = list(read_results(folder).results)
    judged = sum(1 for r in results if r.verdict == "pass" for m in r.metrics if m.passed and not m.weak)
    return table(floor_rows(results, over), judged, over)

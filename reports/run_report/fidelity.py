"""Which verdicts hold only in an interpreter: one row per subject that did not run natively.

A Pallas kernel interpreted on CPU is judged on its math; whether its TPU or GPU would accept
it at all is judged only by the checks that lower its call for that hardware (the registry's
checks that need ``lowering``). A reviewer reads a green ``forward`` in interpret mode
differently from a green one on the chip, so the report says, per subject, which verdicts are
the interpreter's and what the lowering checks found.

Pure functions of the results (stdlib only, like ``reports.run_report.grid``: the gate runs without JAX).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

from conformance.suite.check_registry import HARDWARE_CHECKS, REPORT_ORDER
from reports.run_report import markdown as md
from reports.run_report.grid import FAILED
from run_records.results_file import CaseResult

NOT_JUDGED = ("unsupported", "unavailable")


@dataclasses.dataclass(frozen=True)
class SubjectFidelity:
    """One subject's split: its interpreter verdicts by check, its lowering verdicts by check."""

    subject: str
    execution: str  # "interpret", or "not run" for a subject only lowered here
    platform: str  # what its call was lowered for ("tpu", "cuda"), "" when never lowered
    interpreted: Counter  # check -> judged results
    lowered: dict[str, Counter]  # hardware check -> verdict -> count


def subject_fidelity(results: Iterable[CaseResult]) -> list[SubjectFidelity]:
    """Every subject that ran in an interpreter or was only lowered here, in name order."""
    by_subject: dict[str, list[CaseResult]] = {}
    for result in results:
        by_subject.setdefault(result.case.subject, []).append(result)
    rows = []
    for subject, own in sorted(by_subject.items()):
        judged = [r for r in own if r.verdict not in NOT_JUDGED]
        hardware = [r for r in judged if r.check in HARDWARE_CHECKS]
        executions = {r.availability.get("execution") for r in own if r.availability.get("available")}
        if "interpret" in executions:
            execution = "interpret"
        elif not executions and hardware:
            execution = "not run"
        else:
            continue  # native (its verdicts are the hardware's), or neither run nor lowered
        lowered: dict[str, Counter] = {}
        for r in hardware:
            lowered.setdefault(r.check, Counter())[r.verdict] += 1
        platform = next((str(r.details["platform"]) for r in hardware if r.details.get("platform")), "")
        interpreted = Counter(r.check for r in judged if r.check not in HARDWARE_CHECKS)
        rows.append(SubjectFidelity(subject, execution, platform, interpreted, lowered))
    return rows


def _verdicts(counts: Counter) -> str:
    total = sum(counts.values())
    bad = sum(counts[v] for v in FAILED)
    parts = [f"{counts['pass']} of {total} pass"]
    if bad:
        parts.append(f"{bad} fail")
    if counts["known"]:
        parts.append(f"{counts['known']} known")
    return ", ".join(parts)


def _row(row: SubjectFidelity) -> list[str]:
    ran = "interpreter" if row.execution == "interpret" else "not run here (lowered only)"
    checks = [c for c in REPORT_ORDER if row.interpreted[c]]
    interpreted = f"{sum(row.interpreted.values())} ({', '.join(checks)})" if checks else "none"
    if row.lowered:
        target = {"tpu": "TPU", "cuda": "GPU"}.get(row.platform, row.platform or "its hardware")
        found = " · ".join(
            f"{check}: {_verdicts(row.lowered[check])}" for check in REPORT_ORDER if check in row.lowered
        )
        hardware = f"for {target}: {found}"
    else:
        hardware = "nothing: no lowering declared, every verdict is the interpreter's"
    return [f"**{row.subject}**", ran, interpreted, hardware]


def fidelity_section(results: Iterable[CaseResult]) -> str | None:
    """The report's table of interpreter-only verdicts, or None when every subject ran natively."""
    rows = subject_fidelity(results)
    if not rows:
        return None
    table = md.table(
        ["subject", "ran in", "interpreter-only verdicts", "judged for the hardware (lowered on CPU)"],
        [_row(r) for r in rows],
    )
    return (
        "**What holds on hardware.** An interpreter accepts what a TPU or GPU may reject: only the "
        f"lowering checks ({', '.join(HARDWARE_CHECKS)}) judge what the chip would get.\n\n{table}"
    )

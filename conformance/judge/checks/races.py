"""``races``: no data race in the kernel's pallas_calls, seen by Pallas TPU interpret mode's
happens-before race detector with two simulated cores (``kernels.runtime.tpu_interpret.detect_races``).

A race is a property of the kernel's schedule, not of its numbers: two programs of a
'parallel' grid dimension writing one output block, or a buffer read before the DMA that
fills it has been waited on. The interpreter runs them in an order that happens to give the
right answer, so the numeric checks pass; a TPU runs them concurrently.
"""

from __future__ import annotations

from collections.abc import Callable

from conformance.judge.artifacts import call_forward, call_gradients
from conformance.judge.checks.base import CheckContext, Outcome, failed, passed
from kernels.runtime import tpu_interpret

SHOWN_RACES = 3  # per call; the count says how many more there were


def races(ctx: CheckContext) -> Outcome:
    """The forward call (and the gradients where the backward runs) with the detector on."""
    calls: list[tuple[str, Callable[[], object]]] = [
        ("forward", lambda: call_forward(ctx.adapter, ctx.case, ctx.oracle.inputs).get("forward"))
    ]
    if ctx.backward:
        calls.append(
            (
                "gradients",
                lambda: call_gradients(ctx.adapter, ctx.case, ctx.oracle.inputs, ctx.oracle.dout).get(
                    "gradients"
                ),
            )
        )
    problems: list[str] = []
    details: dict[str, object] = {}
    for name, call in calls:
        _, found = tpu_interpret.detect_races(call)
        details[f"{name}_races"] = len(found.races) or int(found.flagged)
        details["cores"] = found.cores
        where = f"{name} of {ctx.case.subject} ({found.cores} simulated cores)"
        if not found.observed:
            problems.append(
                f"{where}: no pallas_call ran under the race detector, so nothing was checked; "
                "a subject declaring race_detection runs its kernels in "
                "kernels.runtime.tpu_interpret.TpuExecution('tpu').context()"
            )
        elif found.found:
            shown = (
                "\n  ".join(found.races[:SHOWN_RACES]) or "(the detector set races_found and printed nothing)"
            )
            more = len(found.races) - SHOWN_RACES
            problems.append(
                f"{where}: {len(found.races) or 1} data race(s) detected by TPU interpret mode:\n  {shown}"
                + (f"\n  ... and {more} more" if more > 0 else "")
            )
    if problems:
        return failed("\n".join(problems), **details)
    summary = " and ".join(name for name, _ in calls)
    return passed(f"{summary}: no race with {details['cores']} simulated cores", **details)

"""Checks over repeated calls: ``determinism`` (bitwise reruns), ``recompile`` (a second
same-shape call compiles nothing) and ``leak`` (live device buffers and host RSS stay
flat).

``recompile`` and ``leak`` do not trust ``Capabilities.jax_runtime`` alone: a subject that
leaves it unset is watched once (``observe_jax``: JAX's caches cleared, its first call watched
for JAX tracing or compiling). Where JAX ran, both checks run their JAX-side parts and record
``UNDECLARED_JAX_RUNTIME``: the report says the declaration contradicts what was observed.
Where it did not, ``leak`` still judges host memory (any subject can leak it) and ``recompile``
is ``unsupported``: nothing compiled, so nothing can recompile.
"""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
from collections.abc import Callable, Sequence

import psutil

from conformance.judge import jax_compat
from conformance.judge.artifacts import call_forward, call_gradients
from conformance.judge.bitwise import bitwise_diff
from conformance.judge.checks.base import CheckContext, Outcome, failed, passed, unsupported
from conformance.judge.inputs import build_inputs
from run_records.results_file import UNDECLARED_JAX_RUNTIME

# Leak thresholds. Growth is measured over a second batch of calls, after a first batch
# has warmed caches and allocator arenas, so one-off growth is not charged as a leak.
LEAK_ARRAYS_PER_CALL = 0.5  # live arrays gained per call: a leak keeps >= 1 per call
LEAK_BYTES_FRACTION = 0.5  # host bytes gained per call, as a fraction of one output's bytes
LEAK_MIN_TRACED_BYTES = 256 << 10  # traced growth below this is caches (e.g. a new dict entry)
LEAK_MIN_RSS_BYTES = 4 << 20  # RSS growth below this is allocator noise whatever the per-call rate


def determinism(ctx: CheckContext) -> Outcome:
    """A second call on bit-identical inputs returns bit-identical outputs (and gradients)."""
    first = ctx.run.forward
    again = call_forward(ctx.adapter, ctx.case, ctx.oracle.inputs).get("forward")
    problems = [bitwise_diff("out", first.out, again.out), bitwise_diff("lse", first.lse, again.lse)]
    if ctx.backward:
        g1 = ctx.run.gradients
        g2 = call_gradients(ctx.adapter, ctx.case, ctx.oracle.inputs, ctx.oracle.dout).get("gradients")
        problems += [bitwise_diff(n, getattr(g1, n), getattr(g2, n)) for n in ("dq", "dk", "dv", "dbias")]
    found = [p for p in problems if p]
    return failed("\n".join(found)) if found else passed()


NOTHING_COMPILED = (
    "no JAX compilation observed: Capabilities.jax_runtime is unset and the subject's first call, "
    "with JAX's caches cleared, traced and compiled nothing under JAX, so nothing can recompile"
)


@dataclasses.dataclass(frozen=True)
class JaxObservation:
    """Whether the subject's calls run through JAX: declared (``Capabilities.jax_runtime``), or
    observed on a first call with JAX's caches cleared (traces and compiles counted)."""

    declared: bool
    observed: bool
    events: tuple[str, ...] = ()

    @property
    def runs_jax(self) -> bool:
        return self.declared or self.observed

    @property
    def contradicts(self) -> bool:
        """Undeclared, yet JAX compiled during the call."""
        return self.observed and not self.declared

    def details(self) -> dict[str, object]:
        return {UNDECLARED_JAX_RUNTIME: 1} if self.contradicts else {}

    def note(self) -> str:
        if not self.contradicts:
            return ""
        return (
            f"; Capabilities.jax_runtime is unset, yet JAX traced or compiled {len(self.events)} time(s) "
            f"during the first call ({', '.join(self.events[:3])}): the declaration contradicts what "
            "was observed, so the JAX-side parts ran"
        )


def observe_jax(ctx: CheckContext, call: Callable[[], object]) -> JaxObservation:
    """Run ``call`` (the check's first call of the subject) and say whether it ran through JAX.

    A declared subject is taken at its word (no cache clearing: its compilations stay warm). An
    undeclared one is watched: JAX's caches are cleared first, so a function jitted by an earlier
    case must trace again, and any trace or compile during the call counts. JAX not importable:
    nothing ran through it."""
    if ctx.capabilities.jax_runtime:
        call()
        return JaxObservation(True, False)
    try:
        jax_compat.clear_caches()
    except ImportError:
        call()
        return JaxObservation(False, False)
    with jax_compat.JaxActivity() as activity:
        call()
    return JaxObservation(False, activity.count > 0, tuple(activity.names))


def recompile(ctx: CheckContext) -> Outcome:
    """After one call, a call with new values of the same shapes triggers no XLA compilation.

    Both calls are made here, the first on salted inputs, the second on the case's own: what
    the check judges never rests on a call cached by an earlier check (JAX's caches may have
    been cleared since, by ``observe_jax`` for another subject)."""
    fresh = build_inputs(ctx.case, salt=1)
    observation = observe_jax(ctx, lambda: call_forward(ctx.adapter, ctx.case, fresh).get("forward"))
    if not observation.runs_jax:
        return unsupported(NOTHING_COMPILED)
    problems = []
    with jax_compat.CompileCounter() as counter:
        call_forward(ctx.adapter, ctx.case, ctx.oracle.inputs).get("forward")
    if counter.count:
        problems.append(
            f"forward compiled {counter.count} time(s) on a second same-shape call: {counter.names[:5]}"
        )
    if ctx.backward:
        call_gradients(ctx.adapter, ctx.case, fresh, ctx.oracle.dout).get("gradients")  # may compile
        with jax_compat.CompileCounter() as counter:
            call_gradients(ctx.adapter, ctx.case, ctx.oracle.inputs, ctx.oracle.dout).get("gradients")
        if counter.count:
            problems.append(
                f"gradients compiled {counter.count} time(s) on a second same-shape call: {counter.names[:5]}"
            )
    if problems:
        return failed("; ".join(problems) + observation.note(), **observation.details())
    return passed(observation.note().lstrip("; "), **observation.details())


@dataclasses.dataclass(frozen=True)
class _Memory:
    """live JAX arrays; host RSS; bytes traced by tracemalloc (Python objects and NumPy buffers)."""

    arrays: int
    rss: int
    traced: int


def _sample(jax_arrays: bool) -> _Memory:
    """Memory now; live JAX arrays only where the subject runs through JAX (else 0)."""
    gc.collect()
    arrays = jax_compat.live_array_count() if jax_arrays else 0
    return _Memory(arrays, psutil.Process().memory_info().rss, tracemalloc.get_traced_memory()[0])


def rss_leaks(window_growths: Sequence[int], floor: float) -> bool:
    """Whether RSS growth over consecutive windows of calls is a leak, not allocator noise.

    The RSS is the one noisy view: the allocator takes pages in jumps (an arena, a cache filling).
    One jump of a few MiB in a healthy run passed the floor (4.3 MiB over 12 calls, a correct
    interpreted paged kernel, once in a loaded CI run), and then a jump in each half (2.1 and
    6.8 MiB, the same kernel, another loaded run). A leak grows with every call: the first two
    windows (the measured calls) must together reach ``floor`` and each reach half of it, and
    every further window (a confirmation, as many calls as the two together) half of it again.
    """
    measured = window_growths[:2]
    return sum(measured) >= floor and min(window_growths) >= floor / 2


def leak(ctx: CheckContext) -> Outcome:
    """Live JAX arrays, host RSS and traced host allocations do not grow with the number of calls.

    Three views because leaks hide in different places: a kept jax.Array shows in the live
    arrays, a kept NumPy array in tracemalloc's count (exact, so small leaks show), and a
    leak in native code only in the RSS.
    """
    calls = ctx.profile.leak_calls

    def one() -> None:
        call_forward(ctx.adapter, ctx.case, ctx.oracle.inputs).get("forward")

    # The warm-up's first call says whether the live JAX arrays are worth counting.
    observation = observe_jax(ctx, one)
    out_bytes = ctx.run.forward.out.nbytes
    for _ in range(calls - 1):  # the rest of the warm-up: caches, arenas, lazily created buffers
        one()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    first_half = calls // 2
    # What is alive now (JAX's caches of every program this worker ran: millions of objects deep
    # into a run) is set aside from the collections below, which then walk only what the measured
    # calls made. A full collection there took about 1.5 s, and this check makes three or four.
    gc.freeze()
    try:
        before = _sample(observation.runs_jax)
        for _ in range(first_half):
            one()
        middle = _sample(observation.runs_jax)
        for _ in range(calls - first_half):
            one()
        after = _sample(observation.runs_jax)
        grew = _Memory(after.arrays - before.arrays, after.rss - before.rss, after.traced - before.traced)
        per_call_floor = LEAK_BYTES_FRACTION * out_bytes * calls
        rss_floor = max(LEAK_MIN_RSS_BYTES, per_call_floor)
        rss_windows = [middle.rss - before.rss, after.rss - middle.rss]
        if rss_leaks(rss_windows, rss_floor):
            # Only a suspect pays for this: a further window of calls, which a leak grows again
            # and a one-off allocator step does not.
            for _ in range(calls):
                one()
            rss_windows.append(_sample(observation.runs_jax).rss - after.rss)
    finally:
        gc.unfreeze()
        if not tracing:
            tracemalloc.stop()
    details = {
        "calls": calls,
        "live_arrays_growth": grew.arrays,
        "rss_growth_bytes": grew.rss,
        "rss_growth_per_window_bytes": rss_windows,
        "traced_growth_bytes": grew.traced,
        "out_bytes": out_bytes,
    }
    problems = []
    if grew.arrays >= LEAK_ARRAYS_PER_CALL * calls:
        problems.append(
            f"{grew.arrays} more live JAX arrays after {calls} calls ({grew.arrays / calls:.2g} per call)"
        )
    if grew.traced >= max(LEAK_MIN_TRACED_BYTES, per_call_floor):
        problems.append(
            f"host allocations still held grew {grew.traced / 2**10:.0f} KiB over "
            f"{calls} calls ({grew.traced / calls / 1024:.0f} KiB per call; "
            f"one output is {out_bytes / 1024:.0f} KiB)"
        )
    if rss_leaks(rss_windows, rss_floor):
        windows = ", ".join(f"{w / 2**20:.1f}" for w in rss_windows)
        problems.append(
            f"host RSS grew {grew.rss / 2**20:.1f} MiB over {calls} calls "
            f"({grew.rss / calls / 1024:.0f} KiB per call; {windows} MiB in each window of "
            f"{first_half}, {calls - first_half} and {calls} calls)"
        )
    arrays = (
        f"live arrays {before.arrays} -> {after.arrays}"
        if observation.runs_jax
        else "live JAX arrays not counted (no JAX ran in its first call)"
    )
    summary = (
        f"{calls} calls: {arrays}, traced host memory +{grew.traced / 1024:.0f} KiB, "
        f"RSS {before.rss / 2**20:.1f} -> {after.rss / 2**20:.1f} MiB"
    )
    details.update(observation.details())
    if problems:
        return failed("; ".join(problems) + f" ({summary}){observation.note()}", **details)
    return passed(summary + observation.note(), **details)

"""Checks over repeated calls: ``determinism`` (bitwise reruns), ``recompile`` (a second
same-shape call compiles nothing) and ``leak`` (live device buffers and host RSS stay
flat)."""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc

import numpy as np
import psutil

from conformance.judge import jax_compat
from conformance.judge.artifacts import call_forward, call_gradients
from conformance.judge.checks.base import CheckContext, Outcome, failed, passed
from conformance.judge.inputs import build_inputs

# Leak thresholds. Growth is measured over a second batch of calls, after a first batch
# has warmed caches and allocator arenas, so one-off growth is not charged as a leak.
LEAK_ARRAYS_PER_CALL = 0.5  # live arrays gained per call: a leak keeps >= 1 per call
LEAK_BYTES_FRACTION = 0.5  # host bytes gained per call, as a fraction of one output's bytes
LEAK_MIN_TRACED_BYTES = 256 << 10  # traced growth below this is caches (e.g. a new dict entry)
LEAK_MIN_RSS_BYTES = 4 << 20  # RSS growth below this is allocator noise whatever the per-call rate


def _bitwise_diff(name: str, a: np.ndarray | None, b: np.ndarray | None) -> str | None:
    if a is None and b is None:
        return None
    if a is None or b is None or np.shape(a) != np.shape(b):
        return f"{name}: present or shaped differently between runs"
    if np.asarray(a).tobytes() == np.asarray(b).tobytes():
        return None
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    differ = ~((a64 == b64) | (np.isnan(a64) & np.isnan(b64)))
    where = tuple(int(i) for i in np.argwhere(differ)[0])
    with np.errstate(invalid="ignore"):
        biggest = float(np.nanmax(np.abs(a64 - b64)))
    return (
        f"{name}: {int(differ.sum())} of {differ.size} elements differ between two runs on the "
        f"same inputs (max difference {biggest:.3g}); first at {list(where)}: "
        f"{a64[where]!r} then {b64[where]!r}"
    )


def determinism(ctx: CheckContext) -> Outcome:
    """A second call on bit-identical inputs returns bit-identical outputs (and gradients)."""
    first = ctx.run.forward
    again = call_forward(ctx.adapter, ctx.case, ctx.oracle.inputs).get("forward")
    problems = [_bitwise_diff("out", first.out, again.out), _bitwise_diff("lse", first.lse, again.lse)]
    if ctx.backward:
        g1 = ctx.run.gradients
        g2 = call_gradients(ctx.adapter, ctx.case, ctx.oracle.inputs, ctx.oracle.dout).get("gradients")
        problems += [_bitwise_diff(n, getattr(g1, n), getattr(g2, n)) for n in ("dq", "dk", "dv", "dbias")]
    found = [p for p in problems if p]
    return failed("\n".join(found)) if found else passed()


def recompile(ctx: CheckContext) -> Outcome:
    """After one call, a call with new values of the same shapes triggers no XLA compilation."""
    ctx.run.forward  # noqa: B018 - the first call may compile
    fresh = build_inputs(ctx.case, salt=1)
    problems = []
    with jax_compat.CompileCounter() as counter:
        call_forward(ctx.adapter, ctx.case, fresh).get("forward")
    if counter.count:
        problems.append(
            f"forward compiled {counter.count} time(s) on a second same-shape call: {counter.names[:5]}"
        )
    if ctx.backward:
        ctx.run.gradients  # noqa: B018
        with jax_compat.CompileCounter() as counter:
            call_gradients(ctx.adapter, ctx.case, fresh, ctx.oracle.dout).get("gradients")
        if counter.count:
            problems.append(
                f"gradients compiled {counter.count} time(s) on a second same-shape call: {counter.names[:5]}"
            )
    return failed("; ".join(problems)) if problems else passed()


@dataclasses.dataclass(frozen=True)
class _Memory:
    """live JAX arrays; host RSS; bytes traced by tracemalloc (Python objects and NumPy buffers)."""

    arrays: int
    rss: int
    traced: int


def _sample() -> _Memory:
    gc.collect()
    return _Memory(
        jax_compat.live_array_count(), psutil.Process().memory_info().rss, tracemalloc.get_traced_memory()[0]
    )


def leak(ctx: CheckContext) -> Outcome:
    """Live JAX arrays, host RSS and traced host allocations do not grow with the number of calls.

    Three views because leaks hide in different places: a kept jax.Array shows in the live
    arrays, a kept NumPy array in tracemalloc's count (exact, so small leaks show), and a
    leak in native code only in the RSS.
    """
    calls = ctx.profile.leak_calls
    out_bytes = ctx.run.forward.out.nbytes

    def batch() -> None:
        for _ in range(calls):
            call_forward(ctx.adapter, ctx.case, ctx.oracle.inputs).get("forward")

    batch()  # warm-up: caches, arenas, lazily created buffers
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        before = _sample()
        batch()
        after = _sample()
    finally:
        if not tracing:
            tracemalloc.stop()
    grew = _Memory(after.arrays - before.arrays, after.rss - before.rss, after.traced - before.traced)
    per_call_floor = LEAK_BYTES_FRACTION * out_bytes * calls
    details = {
        "calls": calls,
        "live_arrays_growth": grew.arrays,
        "rss_growth_bytes": grew.rss,
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
    if grew.rss >= max(LEAK_MIN_RSS_BYTES, per_call_floor):
        problems.append(
            f"host RSS grew {grew.rss / 2**20:.1f} MiB over {calls} calls "
            f"({grew.rss / calls / 1024:.0f} KiB per call)"
        )
    summary = (
        f"{calls} calls: live arrays {before.arrays} -> {after.arrays}, "
        f"traced host memory +{grew.traced / 1024:.0f} KiB, "
        f"RSS {before.rss / 2**20:.1f} -> {after.rss / 2**20:.1f} MiB"
    )
    if problems:
        return failed("; ".join(problems) + f" ({summary})", **details)
    return passed(summary, **details)

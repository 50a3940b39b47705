"""One benchmark case, measured through pytest-benchmark, with the extra_info the gate reads.

What is timed is the adapter's own call, canonical NumPy in and out, exactly as the
conformance suite calls it: host-device copies of q, k, v and of the outputs are
included, the same way for every JAX version. Each benchmark gets a fresh adapter
(from ``kernels.registry.resolve``), so no compiled function crosses cases.

* ``forward``: ``adapter.forward``; ``forward_backward``: ``adapter.gradients`` (the
  forward pass and the backward pass of ``sum(out * dout)``). One cold call (trace
  and compile: ``first_call_s``), one warm call to size the rounds, then rounds
  enough to fill the list's ``target_s`` (within its min/max rounds).
* ``compile``: every round calls ``forward`` once on a fresh adapter, so the median
  is the cold first-call latency; ``compile_s`` is that minus the steady-state median
  measured afterwards. Adapter-agnostic: no adapter exposes its jitted function.
  JAX's persistent compilation cache is switched off for the run (see conftest), or
  a "cold" call would read a compiled executable from disk.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.cases import BenchCase
from benchmarks.memory import DeviceStats, MemoryReading, jax_device_stats, measure_peak
from benchmarks.shapes import ShapeList, shape_list
from kernels.contract.base import Adapter

AdapterFactory = Callable[[], Adapter]


def choose_rounds(steady_s: float, settings: ShapeList) -> int:
    """Rounds that take about ``settings.target_s``, clamped to [min_rounds, max_rounds]."""
    wanted = math.ceil(settings.target_s / steady_s) if steady_s > 0 else settings.max_rounds
    return max(settings.min_rounds, min(settings.max_rounds, wanted))


def timed(call: Callable[[], Any]) -> float:
    """Seconds one call takes (the adapters return NumPy arrays, so the call is synchronous)."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def adapter_call(adapter: Adapter, case: BenchCase) -> Callable[[], Any]:
    """The zero-argument call this case times, with its inputs built once, outside the timing."""
    inputs = case.shape.inputs(seed=0)
    spec = case.shape.spec(adapter.capabilities().causal_alignments)
    if case.mode == "forward_backward":
        dout = case.shape.inputs(seed=1).q
        return lambda: adapter.gradients(inputs, spec, dout)
    return lambda: adapter.forward(inputs, spec)


def run_case(
    benchmark: Any,
    case: BenchCase,
    make_adapter: AdapterFactory,
    device_stats: DeviceStats = jax_device_stats,
) -> dict[str, Any]:
    """Measure ``case`` with the pytest-benchmark fixture; returns (and sets) its extra_info.

    Raises ``FreshAdapterUnavailable`` for a compile case whose factory returns a
    shared instance (its compiled functions are warm, so no cold call can be timed).
    """
    settings = shape_list(case.shape_list)
    benchmark.group = f"{case.mode} ({case.execution})"
    if case.mode == "compile":
        figures, reading = _compile(benchmark, case, make_adapter, settings, device_stats)
    else:
        figures, reading = _steady(benchmark, case, make_adapter(), settings, device_stats)
    info = {**case_extra_info(case), **figures, **reading.extra_info()}
    benchmark.extra_info.update(info)
    return info


class FreshAdapterUnavailable(RuntimeError):
    """The subject's factory hands out one shared instance: compile time cannot be measured cold."""


def _steady(
    benchmark: Any, case: BenchCase, adapter: Adapter, settings: ShapeList, device_stats: DeviceStats
) -> tuple[dict[str, Any], MemoryReading]:
    call = adapter_call(adapter, case)
    first = timed(call)
    probe = timed(call)
    rounds = choose_rounds(probe, settings)
    _, reading = measure_peak(lambda: benchmark.pedantic(call, rounds=rounds, iterations=1), device_stats)
    steady = _median(benchmark, fallback=probe)
    return {"first_call_s": first, "compile_s": max(first - steady, 0.0), "rounds": rounds}, reading


def _compile(
    benchmark: Any,
    case: BenchCase,
    make_adapter: AdapterFactory,
    settings: ShapeList,
    device_stats: DeviceStats,
) -> tuple[dict[str, Any], MemoryReading]:
    a, b = make_adapter(), make_adapter()
    if a is b:
        raise FreshAdapterUnavailable(
            f"{case.subject}: resolving it twice returned the same adapter instance, whose compiled "
            "functions stay warm; compile time needs a factory that builds a fresh adapter"
        )
    latest: list[Adapter] = []  # the last round's adapter, kept to time steady calls afterwards

    def setup() -> tuple[tuple[Callable[[], Any]], dict[str, Any]]:
        latest[:] = [make_adapter()]
        return (adapter_call(latest[0], case),), {}

    rounds = settings.compile_rounds
    _, reading = measure_peak(
        lambda: benchmark.pedantic(lambda call: call(), setup=setup, rounds=rounds, iterations=1),
        device_stats,
    )
    first = _median(benchmark, fallback=math.nan)
    call = adapter_call(latest[0], case)
    steady = statistics.median(timed(call) for _ in range(settings.min_rounds))
    if math.isnan(first):  # benchmarks disabled: pytest-benchmark ran the round but kept no stats
        first = steady
    return {
        "first_call_s": first,
        "steady_s": steady,
        "compile_s": max(first - steady, 0.0),
        "rounds": rounds,
    }, reading


def _median(benchmark: Any, fallback: float) -> float:
    """The median pytest-benchmark measured; ``fallback`` under --benchmark-disable (no stats)."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    return float(stats.median) if stats is not None and stats.median is not None else fallback


def case_extra_info(case: BenchCase) -> dict[str, Any]:
    """The case as extra_info: ``execution`` (the gate's pairing guard) and what was run."""
    s = case.shape
    return {
        "execution": case.execution,
        "execution_detail": case.execution_detail,
        "shape_list": case.shape_list,
        "subject": case.subject,
        "mode": case.mode,
        "batch": s.batch,
        "heads": s.heads,
        "length": s.length,
        "head_dim": s.head_dim,
        "causal": s.causal,
        "dtype": s.dtype,
        "forward_flops": s.forward_flops,
    }

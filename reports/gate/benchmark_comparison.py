"""The gate's benchmark rules: a benchmark slower, or needing more peak memory, than the
thresholds allow (both folders must hold benchmarks.json; see run_records/benchmarks_file.py)."""

from __future__ import annotations

from reports.gate.findings import (
    Finding,
)
from reports.gate.thresholds import Thresholds
from reports.run_report import markdown as md
from run_records.benchmarks_file import Benchmark


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

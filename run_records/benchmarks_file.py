"""Where the gate finds a run's benchmarks, and how it reads them. Nothing else reads them.

Location: ``<report folder>/benchmarks.json``, the file pytest-benchmark writes with
``--benchmark-json``. Format: pytest-benchmark's JSON, of which the gate reads,
per entry of ``benchmarks``:

* ``fullname`` (else ``name``): the key that pairs base and candidate entries;
* ``stats.median``: seconds per call, the speed compared (the median resists the
  outliers a shared machine produces);
* ``extra_info.peak_memory_bytes`` (also accepted: ``peak_device_bytes``,
  ``peak_rss_bytes``): the peak memory compared, with ``extra_info.memory_kind``
  (e.g. "device", "host_rss") saying what was measured;
* ``extra_info.execution`` ("interpret" or "native", ``kernels.contract.base.Availability.execution``):
  timings are compared only between entries that ran the same way; interpret-mode
  timings describe the interpreter, not the kernel. Older files may carry a sentence
  here instead; ``execution_kind`` reads it.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from run_records.results_file import ResultsFileError, read_json_file

BENCHMARKS_FILE = "benchmarks.json"
MEMORY_KEYS = ("peak_memory_bytes", "peak_device_bytes", "peak_rss_bytes")


@dataclasses.dataclass(frozen=True)
class Benchmark:
    name: str
    median_s: float
    memory_bytes: float | None = None
    memory_kind: str = ""
    execution: str = ""
    subject: str = ""  # extra_info.subject, when the benchmark names it


def benchmarks_path(folder: Path) -> Path:
    return Path(folder) / BENCHMARKS_FILE


def read_benchmarks(folder: Path) -> dict[str, Benchmark] | None:
    """The folder's benchmarks by name, or None when it has no benchmarks.json.

    Raises ResultsFileError naming the file (and line, for JSON syntax errors).
    """
    path = benchmarks_path(folder)
    data = read_json_file(path, "benchmark", "rerun the benchmarks or delete it")
    if data is None:
        return None
    entries = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ResultsFileError(
            f"{path}:1: no 'benchmarks' list; this is not pytest-benchmark JSON "
            "(write it with --benchmark-json)"
        )
    benchmarks = {}
    for index, entry in enumerate(entries):
        benchmark = _benchmark(entry)
        if benchmark is None:
            raise ResultsFileError(
                f"{path}: benchmarks[{index}] has no name or no numeric stats.median; rerun the benchmarks"
            )
        benchmarks[benchmark.name] = benchmark
    return benchmarks


def _benchmark(entry: Any) -> Benchmark | None:
    if not isinstance(entry, dict):
        return None
    name = entry.get("fullname") or entry.get("name")
    stats = entry.get("stats")
    median = stats.get("median") if isinstance(stats, dict) else None
    if not isinstance(name, str) or not _number(median):
        return None
    extra = entry.get("extra_info") if isinstance(entry.get("extra_info"), dict) else {}
    memory_key = next((k for k in MEMORY_KEYS if _number(extra.get(k))), None)
    kind = str(extra.get("memory_kind") or (memory_key or "").removeprefix("peak_").removesuffix("_bytes"))
    return Benchmark(
        name=name,
        median_s=float(median),
        memory_bytes=float(extra[memory_key]) if memory_key else None,
        memory_kind=kind if memory_key else "",
        execution=execution_kind(str(extra["execution"])) if extra.get("execution") else "",
        subject=str(extra.get("subject", "")),
    )


def execution_kind(value: str) -> str:
    """``extra_info.execution`` -> "interpret" or "native", the literal the gate pairs on.

    Written today as the literal (``Availability.execution``), which passes unchanged.
    The one place that reads prose: files written when adapters described how they ran
    only in a sentence ("Pallas generic interpreter (interpret=True) on CPU", "native
    Mosaic on TPU"), where any mention of an interpreter meant interpret mode.
    """
    if value in ("native", "interpret"):
        return value
    return "interpret" if "interpret" in value.lower() else "native"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

"""pytest options and parametrization for ``pytest benchmarks`` (needs pytest-benchmark).

pytest benchmarks --benchmark-json reports/jax-X/benchmarks.json
    [--bench-subjects all|a,b] [--bench-shapes auto|interpret|cpu|accelerator|smoke]
    [--bench-execution all|native|interpret]
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.cases import EXECUTION_FILTERS, order_key, plan_subject
from benchmarks.shapes import LIST_NAMES
from kernels.registry import UnknownSubjectError, resolve, subject_names
from kernels.runtime.jax_runtime import default_backend, installed_jax_versions


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bench", "attention subject benchmarks")
    group.addoption(
        "--bench-subjects",
        default="all",
        help="subjects to benchmark: 'all' (default), or a comma-separated list of names "
        "or dotted paths 'package.module:function'",
    )
    group.addoption(
        "--bench-shapes",
        default="auto",
        choices=("auto", *LIST_NAMES),
        help="shape list; auto (default) picks 'interpret' for interpreted kernels, else "
        "'cpu' or 'accelerator' by JAX's platform (benchmarks/shapes.py)",
    )
    group.addoption(
        "--bench-execution",
        default="all",
        choices=EXECUTION_FILTERS,
        help="benchmark only native or only interpreted subjects (default: all)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # A "cold" first call must compile: with JAX's persistent cache on it would read
    # a compiled executable from disk instead, and compile time would read as zero.
    import jax

    try:
        jax.config.update("jax_enable_compilation_cache", False)
    except (AttributeError, KeyError, ValueError):  # older JAX: the cache is off unless a dir is set
        pass


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "bench_case" not in metafunc.fixturenames:
        return
    option = metafunc.config.getoption
    requested = option("--bench-subjects").strip()
    names = subject_names() if requested == "all" else [n.strip() for n in requested.split(",") if n.strip()]
    platform = default_backend()
    planned = []
    for name in names:
        try:
            adapter = resolve(name)
        except UnknownSubjectError as error:
            raise pytest.UsageError(f"--bench-subjects: {error}") from None
        planned += plan_subject(
            name, adapter, platform, option("--bench-shapes"), option("--bench-execution")
        )
    planned.sort(key=order_key)
    metafunc.parametrize(
        "bench_case",
        [
            pytest.param(p.case, id=p.id, marks=[pytest.mark.skip(reason=p.skip)] if p.skip else [])
            for p in planned
        ],
    )


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Which JAX, and on what: a benchmarks.json must say so without its folder name."""
    import jax

    device = jax.local_devices()[0]
    machine_info["jax"] = dict(installed_jax_versions())
    machine_info["jax_platform"] = default_backend()
    machine_info["jax_device_kind"] = getattr(device, "device_kind", "")
    machine_info["jax_device_count"] = jax.local_device_count()


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    output_json["attention_conformance"] = {
        "note": "extra_info.execution says how each subject ran; interpret-mode timings describe "
        "the Pallas interpreter, not the kernel, and the gate never compares them with native ones",
        "memory_kinds": "device: device peak_bytes_in_use; device_bound: an upper bound (an earlier "
        "benchmark set the device's peak); host_rss: peak process RSS (a proxy where the "
        "backend has no memory statistics); host_rss_bound: lifetime peak RSS",
    }

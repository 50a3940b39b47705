"""Each available subject's speed, compile time and peak memory (cases: benchmarks/cases.py)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.cases import BenchCase
from benchmarks.timing import FreshAdapterUnavailable, run_case
from kernels.registry import resolve


def test_subject(benchmark: Any, bench_case: BenchCase) -> None:
    try:
        run_case(benchmark, bench_case, lambda: resolve(bench_case.subject))
    except FreshAdapterUnavailable as error:
        pytest.skip(str(error))

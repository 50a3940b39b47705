"""Peak memory: a positive reading of the right kind, device statistics preferred."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benchmarks.memory import MEMORY_KINDS, measure_peak


def test_host_rss_sees_an_allocation() -> None:
    size = 64 * 2**20

    def work() -> int:
        block = np.ones(size, dtype=np.uint8)  # touched, so resident
        return int(block[::4096].sum())

    result, reading = measure_peak(work, device_stats=lambda: None)
    assert result == size // 4096
    assert reading.kind in ("host_rss", "host_rss_bound")
    if sys.platform == "linux":
        assert reading.kind == "host_rss", "Linux resets the RSS high-water mark through /proc"
    assert reading.peak_bytes >= reading.host_rss_before_bytes + size * 0.9
    info = reading.extra_info()
    assert info["peak_memory_bytes"] == reading.peak_bytes > 0
    assert info["memory_kind"] in MEMORY_KINDS


def _stats(*readings: dict[str, int]):
    queue = list(readings)
    return lambda: queue.pop(0)


@pytest.mark.parametrize(
    ("peaks", "kind", "value"),
    [((100, 300), "device", 300), ((500, 500), "device_bound", 500)],
)
def test_device_peak_is_exact_only_when_the_work_raised_it(peaks, kind, value) -> None:
    before, after = ({"peak_bytes_in_use": p, "bytes_in_use": 10} for p in peaks)
    _, reading = measure_peak(lambda: None, device_stats=_stats(before, after))
    assert (reading.kind, reading.peak_bytes) == (kind, value)
    assert reading.host_peak_rss_bytes > 0  # the host is measured too
    assert reading.extra_info()["device_in_use_before_bytes"] == 10


def test_jax_cpu_has_no_device_statistics_so_host_rss_is_the_proxy() -> None:
    from benchmarks.memory import jax_device_stats
    from kernels.runtime.jax_runtime import default_backend

    if default_backend() != "cpu":
        pytest.skip("an accelerator backend reports device statistics")
    assert jax_device_stats() is None

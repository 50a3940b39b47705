"""Peak memory of a piece of work: device memory where the backend reports it, else host RSS.

Kinds (``extra_info.memory_kind``; the gate compares peaks only between equal kinds):

* ``device``: ``peak_bytes_in_use`` of JAX's first local device (GPU, TPU), bytes held
  by live buffers, not the allocator's pool. JAX cannot reset that counter, so a
  reading is the work's own peak only when the work raised it; the benchmark order
  (smallest shapes first) makes that the usual case.
* ``device_bound``: the work did not raise the device's peak, which a larger earlier
  benchmark set; the value is that earlier peak, an upper bound on this work's.
* ``host_rss``: the process's peak resident set while the work ran (Linux: the VmHWM
  high-water mark, reset through ``/proc/self/clear_refs`` first). A stated proxy for
  backends without memory statistics, such as JAX's CPU backend: it includes the
  interpreter, JAX and every library loaded, not only the kernel's buffers. Free heap
  is handed back to the OS first (``gc.collect``, glibc's ``malloc_trim``), so what
  earlier benchmarks freed does not count; ``host_rss_increase_bytes`` is the rise
  above the RSS at the start, the part that belongs to the work itself.
* ``host_rss_bound``: the peak could not be reset (not Linux, or /proc refused): the
  process's lifetime peak RSS (``resource``), an upper bound.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import resource
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import psutil

T = TypeVar("T")
DeviceStats = Callable[[], Mapping[str, Any] | None]
MEMORY_KINDS = ("device", "device_bound", "host_rss", "host_rss_bound")

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


@dataclasses.dataclass(frozen=True)
class MemoryReading:
    """What ``measure_peak`` saw. ``peak_bytes`` is the value the gate compares, of ``kind``."""

    peak_bytes: int
    kind: str
    host_peak_rss_bytes: int  # always measured, also when the device's peak is the headline
    host_rss_before_bytes: int
    device_in_use_before_bytes: int | None = None

    def extra_info(self) -> dict[str, Any]:
        """What ``run_records/benchmarks_file.py`` reads (peak_memory_bytes, memory_kind), and context."""
        info: dict[str, Any] = {
            "peak_memory_bytes": self.peak_bytes,
            "memory_kind": self.kind,
            "host_peak_rss_bytes": self.host_peak_rss_bytes,
            "host_rss_before_bytes": self.host_rss_before_bytes,
            "host_rss_increase_bytes": max(self.host_peak_rss_bytes - self.host_rss_before_bytes, 0),
        }
        if self.device_in_use_before_bytes is not None:
            info["device_in_use_before_bytes"] = self.device_in_use_before_bytes
        return info


def jax_device_stats() -> Mapping[str, Any] | None:
    """``memory_stats()`` of JAX's first local device, or None where the backend has none (CPU)."""
    import jax

    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # some backends raise instead of returning None
        return None
    return stats if stats and "peak_bytes_in_use" in stats else None


def measure_peak(
    work: Callable[[], T], device_stats: DeviceStats = jax_device_stats
) -> tuple[T, MemoryReading]:
    """Run ``work()`` once and return its result with the peak memory it reached.

    device_stats: where device statistics come from (injectable for tests); when it
    returns None the host RSS is the headline reading.
    """
    before = device_stats()
    _release_free_memory()
    reset = _reset_host_peak()
    rss_before = psutil.Process().memory_info().rss
    result = work()
    host_peak = _host_peak(reset)
    host_peak = max(host_peak, psutil.Process().memory_info().rss)
    after = device_stats() if before is not None else None
    if before is not None and after is not None:
        old_peak, new_peak = int(before["peak_bytes_in_use"]), int(after["peak_bytes_in_use"])
        kind = "device" if new_peak > old_peak else "device_bound"
        reading = MemoryReading(new_peak, kind, host_peak, rss_before, int(before.get("bytes_in_use", 0)))
    else:
        reading = MemoryReading(host_peak, "host_rss" if reset else "host_rss_bound", host_peak, rss_before)
    return result, reading


def _release_free_memory() -> None:
    """Collect garbage and return glibc's free heap pages to the OS (a no-op elsewhere)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_host_peak() -> bool:
    """Reset the kernel's per-process RSS high-water mark (Linux >= 4.0); False where impossible."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return _vm_hwm() is not None


def _host_peak(reset: bool) -> int:
    if reset:
        hwm = _vm_hwm()
        if hwm is not None:
            return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB elsewhere


def _vm_hwm() -> int | None:
    """VmHWM (peak RSS since the last reset) in bytes, from /proc/self/status."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None

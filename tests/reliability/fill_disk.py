"""A pytest plugin that makes the report folder's disk fill up, for the full-disk tests.

``-p tests.reliability.fill_disk`` with ``FILL_DISK_AFTER_BYTES=N``: results.jsonl accepts
N bytes, then a write stores what still fits and fails with ENOSPC, as a full disk does
(half a record on disk). Loaded in every process; only the controller writes records.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from run_records import results_file


class _FillingFile:
    def __init__(self, handle: Any, budget: int):
        self._handle = handle
        self._left = budget

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        if len(data) > self._left:
            self._handle.write(data[: self._left].decode("utf-8", errors="ignore"))
            self._handle.flush()
            self._left = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self._left -= len(data)
        return self._handle.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


_original_init = results_file.ResultsWriter.__init__


def _filling_init(self: results_file.ResultsWriter, *args: Any, **kwargs: Any) -> None:
    budget = int(os.environ["FILL_DISK_AFTER_BYTES"])
    _original_init(self, *args, **kwargs)
    self._file = _FillingFile(self._file, budget)


if "FILL_DISK_AFTER_BYTES" in os.environ:
    results_file.ResultsWriter.__init__ = _filling_init  # type: ignore[method-assign]

"""One writer per report folder: a run holds an exclusive lock on ``<report dir>/.lock``.

Two runs appending to one ``results.jsonl`` interleave their lines (seen: 6 corrupt lines
among 35), and the gate then rejects the folder. The lock is ``fcntl.flock`` on a file
that holds the holder's pid: the kernel releases it when the holder dies, however it
dies, so a lock left by a dead process is simply taken over; the pid is only for the
message. Lives in ``reports/`` (stdlib only) because ``reports merge`` takes it too, on its output.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

from run_records.results_file import LOCK_FILE, lock_holder


class FolderBusyError(RuntimeError):
    """Another live process writes this report folder."""


class FolderLock:
    """An exclusive, non-blocking lock on a report folder, held until ``release``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._handle: IO[str] | None = None

    def acquire(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            handle = self._open()
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                holder = lock_holder(self.folder)
                who = f"pid {holder}" if holder else "another process"
                raise FolderBusyError(
                    f"{self.folder} is being written by {who} (lock {self.path}); wait for that run "
                    "to finish, or give this one its own --report-dir"
                ) from None
            if self._still_the_lock_file(handle):
                break
            # We opened the file just before its holder removed it on release: our lock is on a
            # file nobody else can open, so a third run would lock the new one beside us. Retry.
            handle.close()
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle
        return self

    def _open(self) -> IO[str]:
        return self.path.open("a+", encoding="utf-8")

    def _still_the_lock_file(self, handle: IO[str]) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._handle is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while still held: nobody can take a lock on a file being removed
        with contextlib.suppress(OSError):
            fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None

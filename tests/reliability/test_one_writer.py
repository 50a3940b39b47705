"""One writer per report folder, and a full disk that loses nothing: end to end, in
subprocesses, on a tiny NumPy subject."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from run_records.folder_lock import FolderBusyError, FolderLock
from run_records.results_file import lock_holder, read_results
from tests.support.suite import SMALL, run_suite, toy

ROOT = Path(__file__).resolve().parents[2]
HOLD = (
    "import sys, time; from run_records.folder_lock import FolderLock\n"
    "lock = FolderLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(120)"
)


def _holder(folder: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_run_on_a_folder_is_refused_and_the_first_ones_results_are_intact(tmp_path):
    first = run_suite(tmp_path, toy("exact"), "-k", SMALL)
    assert first.returncode == 0, first.stdout[-2000:]
    before = (tmp_path / "results.jsonl").read_bytes()
    holder = _holder(tmp_path)  # a run still writing this folder
    try:
        for extra in ((), ("--resume",)):
            second = run_suite(tmp_path, toy("exact"), "-k", SMALL, *extra)
            assert second.returncode == pytest.ExitCode.USAGE_ERROR
            lines = [line for line in (second.stdout + second.stderr).splitlines() if "being written" in line]
            assert len(lines) == 1 and f"pid {holder.pid}" in lines[0] and "--report-dir" in lines[0]
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / "results.jsonl").read_bytes() == before


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    holder = _holder(tmp_path)
    assert lock_holder(tmp_path) == holder.pid
    with pytest.raises(FolderBusyError, match=f"pid {holder.pid}"):
        FolderLock(tmp_path).acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (tmp_path / ".lock").exists() and lock_holder(tmp_path) is None  # stale file, no lock
    lock = FolderLock(tmp_path).acquire()
    assert lock_holder(tmp_path) == os.getpid()
    lock.release()
    assert lock_holder(tmp_path) is None and not (tmp_path / ".lock").exists()


def test_a_run_that_opened_the_lock_file_as_its_holder_released_it_does_not_share_the_folder(
    tmp_path, monkeypatch
):
    """The release removes the file, then unlocks it: a run that opened the old file in between
    must not keep a lock on it, or a third run would lock the new file beside it."""
    first = FolderLock(tmp_path).acquire()
    opened_before_release = (tmp_path / ".lock").open("a+", encoding="utf-8")
    late = FolderLock(tmp_path)
    opens = iter([opened_before_release])
    real_open = FolderLock._open
    monkeypatch.setattr(late, "_open", lambda: next(opens, None) or real_open(late))
    first.release()
    late.acquire()
    assert opened_before_release.closed  # it let go of the removed file and took the new one
    with pytest.raises(FolderBusyError, match=f"pid {os.getpid()}"):
        FolderLock(tmp_path).acquire()
    late.release()


def test_a_full_disk_ends_in_one_line_keeps_every_record_and_resume_finishes(tmp_path):
    full = tmp_path / "full"
    env = {**os.environ, "FILL_DISK_AFTER_BYTES": "12000"}
    start = time.monotonic()
    done = run_suite(
        full, toy("exact"), "-p", "tests.reliability.fill_disk", "-k", SMALL, shrink=True, env=env
    )
    output = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    assert "Traceback" not in output and "INTERNALERROR" not in output
    told = [line for line in output.splitlines() if line.startswith("conformance: ") and "no space" in line]
    assert len(told) == 1 and str(full) in told[0] and "MiB" in told[0] and "--resume" in told[0]
    kept = read_results(full)
    assert not kept.complete and not kept.torn_last_line and 0 < len(kept.results)
    assert f"after {len(kept.results)} records" in told[0]
    # Space freed: --resume finishes the run; it holds exactly what one uninterrupted run holds.
    resumed = run_suite(full, toy("exact"), "-k", SMALL, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-2000:]
    whole = run_suite(tmp_path / "whole", toy("exact"), "-k", SMALL)
    assert whole.returncode == 0
    finished, reference = read_results(full), read_results(tmp_path / "whole")
    assert finished.complete
    assert {r.key: r.verdict for r in finished.results} == {r.key: r.verdict for r in reference.results}
    assert time.monotonic() - start < 600

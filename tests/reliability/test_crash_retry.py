"""A crash counts once it happens twice: a check that crashed its worker is rerun alone in
a fresh process first. ``tests.faulty.kernels:crash_once`` aborts on its first trigger
call only (as XLA:CPU's compiler sometimes does in a long run); the kernels that crash
every time are in test_faults.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conformance.harness.isolation import Crash, Retry, crash_reason
from conformance.harness.progress import PREFIX as PROGRESS_PREFIX
from run_records.results_file import CaseResult, read_results
from tests.reliability.suite import FAULTY, FAULTY_CASE, TINY
from tests.support.suite import run_suite

IMPL = f"{FAULTY}:crash_once"
CHECKS = ("shape_dtype", "forward", "finite")


def crash_once_run(folder: Path, *args: str):
    """A run of crash_once with a marker folder of its own: the finished process, its results,
    the faulty case's records by check, and report.md."""
    marker = folder / "marker"
    marker.mkdir()
    env = {**os.environ, "CRASH_ONCE_DIR": str(marker)}
    done = run_suite(
        folder / "report",
        IMPL,
        "-k",
        TINY,
        "--timeout",
        "60",
        "--worker-memory-limit",
        "2G",
        *args,
        env=env,
        isolated=True,
    )
    results = read_results(folder / "report")
    records = {r.check: r for r in results.results if r.case.case_id.endswith(FAULTY_CASE)}
    return done, results, records, (folder / "report" / "report.md").read_text()


def crashed(records: dict[str, CaseResult]) -> CaseResult:
    """The check that met the crash: xdist chooses which check of the case runs first."""
    (first,) = [r for r in records.values() if r.reason.startswith("worker gw")]
    return first


@pytest.fixture(scope="module")
def flaky_run(tmp_path_factory):
    return crash_once_run(tmp_path_factory.mktemp("flaky"))


def test_a_crash_that_does_not_happen_again_is_flaky(flaky_run):
    _, _, records, _ = flaky_run
    first = crashed(records)
    assert first.verdict == "flaky", first.reason
    assert "crashed once, then the check ran normally when retried in a fresh process" in first.reason
    assert "SIGABRT" in first.reason and "retry: pass in" in first.reason
    assert "in crash_once" in first.reason  # where the first attempt died
    assert "SIGABRT" in first.details["first_attempt"] and "worker gw" in first.details["first_attempt"]
    assert first.details["retry"].startswith("pass in ") and first.details["retry_verdict"] == "pass"
    assert first.features == (first.check, "float32")
    assert repr(IMPL) in first.repro  # the repro script, as for any crash


def test_a_flaky_case_runs_its_other_checks_normally(flaky_run):
    _, results, records, _ = flaky_run
    first = crashed(records)
    assert sorted(records) == sorted(CHECKS)
    others = [r for r in records.values() if r is not first]
    assert all(r.verdict == "pass" and not r.reason.startswith("not run") for r in others), others
    assert results.complete


def test_flaky_is_no_failure_in_the_exit_status_or_the_report(flaky_run):
    done, _, records, report = flaky_run
    assert done.returncode == 0, done.stdout[-3000:]
    # The suite's own lines, not the progress line (which counts verdicts too).
    own = [line for line in done.stdout.splitlines() if not line.startswith(PROGRESS_PREFIX)]
    assert any("1 flaky" in line for line in own) and "failed" not in own[-1]
    assert "**✅ PASS**" in report
    section = report.split("🎲 Flaky checks (crashed once, then ran normally)", 1)[1]
    assert crashed(records).case.case_id in section and "SIGABRT" in section and "pass in" in section


def test_no_crash_retry_keeps_the_first_crash_as_an_error(tmp_path):
    done, _, records, _ = crash_once_run(tmp_path, "--no-crash-retry")
    assert done.returncode == 1
    first = crashed(records)
    assert first.verdict == "error"
    killed = r"worker gw\d+ crashed: the worker process was killed by SIGABRT \(Aborted\)"
    assert re.match(killed, first.reason), first.reason
    assert "retry" not in first.reason and first.details == {}
    # the subject's block, as every record has it: a ledger entry scoped to an execution reads it
    assert first.availability.get("available") is True and "versions" in first.availability, (
        first.availability
    )
    rest = [r for r in records.values() if r is not first]
    assert all(r.availability == first.availability for r in rest)
    assert all(
        r.verdict == "error"
        and r.reason.startswith("not run: an earlier check of this case crashed its worker")
        for r in rest
    ), rest


def test_the_reason_names_both_attempts():
    """Without a subprocess: how each retry outcome reads in the record."""
    crash = Crash(returncode=-6, last_words="", seconds=1.5)
    killed = "the worker process was killed by SIGABRT (Aborted) after 1.5 s"
    assert crash_reason("gw3", crash, None) == f"worker gw3 crashed: {killed}"
    failed = Retry(seconds=0.25, verdict="fail", reason="out has shape (1, 1, 112, 64)\nmore")
    assert crash_reason("gw3", crash, failed) == (
        "worker gw3 crashed once, then the check ran normally when retried in a fresh process: "
        f"first attempt: {killed}; retry: fail in 0.2 s: out has shape (1, 1, 112, 64)"
    )
    segfault = Retry(seconds=3.0, returncode=-11)
    assert crash_reason("gw3", crash, segfault) == (
        f"worker gw3 crashed twice: {killed} (confirmed by a retry in a fresh process, "
        "which was killed by SIGSEGV (Segmentation fault) after 3.0 s)"
    )


@pytest.mark.parametrize(
    ("retry", "summary"),
    [
        (
            Retry(seconds=12.0, returncode=1, last_words="Timeout (0:00:10)!\n", timeout=10),
            "timed out after 12.0 s (--timeout 10 s)",
        ),
        (Retry(seconds=130.0, returncode=None, timeout=10), "timed out after 130.0 s (--timeout 10 s)"),
        (Retry(seconds=2.0, returncode=3), "exited with status 3 after 2.0 s without finishing the check"),
        (
            Retry(seconds=2.0, returncode=1, last_line="ImportError: no module 'm'"),
            "exited with status 1 after 2.0 s without finishing the check: ImportError: no module 'm'",
        ),
        (
            Retry(seconds=2.0, returncode=1, last_words="Fatal Python error: Aborted\n\nCurrent thread"),
            "died: Aborted after 2.0 s",
        ),
        (
            Retry(seconds=0.5, verdict="error", reason="forward raised RuntimeError: boom"),
            "error in 0.5 s: forward raised RuntimeError: boom",
        ),
        (Retry(seconds=0.5, verdict="pass", reason="ok"), "pass in 0.5 s"),
    ],
)
def test_each_retry_outcome_reads_in_one_line(retry, summary):
    assert retry.summary() == summary
    assert retry.crashed == (retry.verdict is None)


def test_only_a_retry_that_passes_makes_a_crash_flaky():
    from conformance.harness.isolation import Retry, crash_verdict

    assert crash_verdict(None) == "error"
    assert crash_verdict(Retry(1.0, None, returncode=-11)) == "error"
    assert crash_verdict(Retry(1.0, "pass", returncode=0)) == "flaky"
    assert crash_verdict(Retry(1.0, "fail", "out: OUT OF TOLERANCE", returncode=0)) == "fail"
    assert crash_verdict(Retry(1.0, "error", "forward raised ValueError", returncode=0)) == "error"

"""Faults of the implementation under test: each becomes a failed case naming the fault,
and every healthy case's result is still there (tests.faulty.kernels, one run for all)."""

from __future__ import annotations

import re

import pytest

from run_records.results_file import read_results
from tests.reliability.suite import FAULTY, FAULTY_CASE, HEALTHY_CASE, TINY
from tests.support.suite import run_suite

FAULTS = ("segfault", "abort", "hang", "hog", "oom_killed", "raises", "wrong_shape", "wrong_type")
CHECKS = ("shape_dtype", "forward", "finite")


@pytest.fixture(scope="module", params=["1", "2"], ids=["workers1", "workers2"])
def run(request, tmp_path_factory):
    """All faulty subjects and a healthy one in one run: 10 s timeout, 2 GiB per worker; with
    one worker (the default) and with two, where a crash must still cost only its own case."""
    folder = tmp_path_factory.mktemp(f"faults-n{request.param}")
    impl = ",".join(f"{FAULTY}:{name}" for name in (*FAULTS, "healthy"))
    done = run_suite(
        folder, impl, "-k", TINY, "-n", request.param, "--timeout", "10", "--worker-memory-limit", "2G"
    )
    results = read_results(folder)
    records = {
        (r.case.subject.split(":")[1], r.case.case_id.split("-", 1)[1], r.check): r for r in results.results
    }
    return done, results, records, (folder / "report.md").read_text()


def faulted(records, name):
    """The check of the faulty case that met the fault, and the case's other records. (Which check
    runs first is xdist's choice: after a crash it may hand the pending tests out in another order.)"""
    records = [records[(name, FAULTY_CASE, check)] for check in CHECKS]
    first = next((r for r in records if not r.reason.startswith("not run")), records[0])
    return first, [r for r in records if r is not first]


def test_the_run_finishes_and_every_healthy_result_is_there(run):
    done, results, records, _ = run
    assert done.returncode == 1, done.stdout[-3000:]
    assert results.complete  # the run went on to its end record
    assert "Traceback" not in done.stderr
    for name in (*FAULTS, "healthy"):
        for check in CHECKS:
            assert records[(name, HEALTHY_CASE, check)].verdict == "pass", (name, check)
    assert all(records[("healthy", FAULTY_CASE, check)].verdict == "pass" for check in CHECKS)


def test_segfault_names_the_signal(run):
    _, _, records, report = run
    first, rest = faulted(records, "segfault")
    assert first.verdict == "error" and "SIGSEGV" in first.reason
    assert re.match(r"worker gw\d+ crashed twice: the worker process was killed by SIGSEGV", first.reason)
    assert "tests/faulty/kernels.py" in first.reason and "in segfault" in first.reason  # where it died
    assert first.features == (first.check, "float32")  # so the error shows in the report's grid
    assert f"run_check(case, '{first.check}', impl='tests.faulty.kernels:segfault')" in first.repro
    assert all(r.verdict == "error" and "not run" in r.reason and "SIGSEGV" in r.reason for r in rest)
    assert "SIGSEGV" in report


def test_abort_names_the_signal(run):
    first, rest = faulted(run[2], "abort")
    assert first.verdict == "error" and "SIGABRT" in first.reason
    assert all(r.verdict == "error" and "SIGABRT" in r.reason for r in rest)


def test_a_crash_that_happens_again_is_confirmed_by_the_retry(run):
    """Every crash is rerun once alone in a fresh process; a repeat makes it an error, "crashed twice"."""
    for name, signal_name in (("segfault", "SIGSEGV"), ("abort", "SIGABRT"), ("oom_killed", "SIGKILL")):
        first, rest = faulted(run[2], name)
        head = first.reason.splitlines()[0]
        assert first.verdict == "error" and re.match(r"worker gw\d+ crashed twice: ", head), first.reason
        assert f"(confirmed by a retry in a fresh process, which was killed by {signal_name}" in head
        assert signal_name in first.details["first_attempt"] and signal_name in first.details["retry"]
        assert first.details["retry_verdict"] == "crashed"
        assert all(r.reason.startswith("not run") and "crashed twice" in r.reason for r in rest)


def test_a_hang_inside_c_holding_the_gil_times_out(run):
    first, rest = faulted(run[2], "hang")
    assert first.verdict == "error"
    assert "timed out" in first.reason and "--timeout 10 s" in first.reason and "in hang" in first.reason
    assert "crashed twice" in first.reason  # the retry in a fresh process hung too, and was stopped
    assert first.details["retry"].startswith("timed out after") and "--timeout 10 s" in first.details["retry"]
    assert all(r.verdict == "error" and "timed out" in r.reason for r in rest)  # not hung again
    assert "timed out" in run[3]


def test_memory_exhaustion_stops_at_the_worker_limit(run):
    first, rest = faulted(run[2], "hog")
    assert first.verdict == "error" and "MemoryError" in first.reason
    assert all(r.verdict == "error" for r in rest)


def test_a_worker_killed_from_outside_names_sigkill(run):
    first, rest = faulted(run[2], "oom_killed")
    assert first.verdict == "error" and "SIGKILL" in first.reason and "out-of-memory killer" in first.reason
    assert all(r.verdict == "error" and "SIGKILL" in r.reason for r in rest)


def test_an_exception_is_an_error_with_its_message(run):
    first, rest = faulted(run[2], "raises")
    expected = "RuntimeError: kernel launch failed: invalid configuration argument"
    assert first.verdict == "error" and expected in first.reason
    assert all(expected in r.reason for r in rest)


def test_a_wrong_shape_fails_shape_and_forward(run):
    records = run[2]
    for check in ("shape_dtype", "forward"):
        record = records[("wrong_shape", FAULTY_CASE, check)]
        assert record.verdict == "fail" and "(1, 1, 112, 64), expected (1, 1, 113, 64)" in record.reason


def test_a_wrong_type_fails_shape_and_forward(run):
    records = run[2]
    shape = records[("wrong_type", FAULTY_CASE, "shape_dtype")]
    assert shape.verdict == "fail" and "expected float32" in shape.reason
    assert records[("wrong_type", FAULTY_CASE, "forward")].verdict == "fail"


def test_when_xdist_gives_up_on_restarts_the_results_stay_incomplete(tmp_path):
    done = run_suite(tmp_path, f"{FAULTY}:abort", "-k", TINY, "--max-worker-restart", "0", isolated=True)
    assert done.returncode == 1
    assert "checks never ran" in done.stdout and "--resume" in done.stdout
    results = read_results(tmp_path)
    assert not results.complete  # the gate will not take a run that skipped cases for a clean one
    assert [r.verdict for r in results.results] == ["error"]
    # The run is ending: the crash is recorded as it stands, without a retry.
    assert re.match(r"worker gw\d+ crashed: ", results.results[0].reason) and not results.results[0].details


def test_jax_runs_normally_under_the_worker_memory_limit(tmp_path):
    """The limit is on the data segment, not address space: XLA's reservations do not trip it."""
    done = run_suite(
        tmp_path,
        "xla",
        "--worker-memory-limit",
        "2G",
        "-k",
        "(test_forward or test_recompile) and xla-float32-full-B2-Hq8-Hkv1-Sq128-Sk128-D64",
    )
    assert done.returncode == 0, done.stdout[-3000:]
    verdicts = {(r.check, r.verdict) for r in read_results(tmp_path).results}
    assert ("forward", "pass") in verdicts and ("recompile", "pass") in verdicts

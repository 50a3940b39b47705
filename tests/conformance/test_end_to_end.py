"""The suite end to end, in a subprocess, on tiny NumPy subjects: records, summary, JUnit,
failure messages with a runnable repro, shrinking, xdist and --resume."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.harness.plugin import EXIT_NOTHING_CHECKED
from reports.run_report.grouping import cause_count_line, group_causes
from run_records.results_file import read_results
from tests.support.suite import ROOT, SMALL, run_suite, toy
from tests.support.toy_subjects import Elsewhere


@pytest.fixture(scope="module")
def exact_run(tmp_path_factory):
    """One process, the correct toy on the small cases, JUnit and plot on: read, never written, by
    the tests below (the plot and JUnit file change no record, so it is also xdist's serial twin)."""
    folder = tmp_path_factory.mktemp("exact")
    return run_suite(folder, toy("exact"), "-k", SMALL, junit=True, plots=True), folder


def test_a_correct_subject_passes_and_every_record_is_written(exact_run):
    done, tmp_path = exact_run
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "ratio-vs-length.png").read_bytes()[:4] == b"\x89PNG"
    assert "(ratio-vs-length.png)" in (tmp_path / "report.md").read_text()
    results = read_results(tmp_path)
    assert results.complete
    verdicts = {r.verdict for r in results.results}
    assert verdicts <= {"pass", "unsupported"} and "pass" in verdicts
    checks = {r.check for r in results.results if r.verdict == "pass"}
    assert {"forward", "lse", "shape_dtype", "finite", "no_mutation", "fully_masked"} <= checks
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["profile"] == "ci" and summary["hypothesis_seed"] == 0
    assert summary["counts"]["pass"] == sum(r.verdict == "pass" for r in results.results)
    assert "jax" in summary["environment"]["libraries"]
    junit = (tmp_path / "junit.xml").read_text()
    assert "conformance_result" in junit


def test_a_wrong_subject_fails_forward_with_the_worst_element_and_a_runnable_repro(tmp_path):
    done = run_suite(
        tmp_path,
        toy("scaled_wrong"),
        "-k",
        "test_forward and float32-full-B1-Hq1-Hkv1-Sq128-Sk128-D64",
        shrink=True,
    )
    assert done.returncode == 1
    assert "OUT OF TOLERANCE" in done.stdout and "worst at" in done.stdout and "Repro" in done.stdout
    failed = [r for r in read_results(tmp_path).results if r.verdict == "fail"]
    assert failed and all(r.check == "forward" for r in failed)
    record = failed[0]
    assert record.metrics[0].ratio > 10 and record.metrics[0].fraction_out_of_tolerance > 0.1
    assert "Shrunk to a smaller failing case" in record.reason  # 1x1 fails the same way
    # The shrunk case is recorded for grouping, and report.md names it once, with its finding.
    minimal = record.details["minimal_case_id"]
    assert f"Shrunk to a smaller failing case: {minimal} (" in record.reason
    report = (tmp_path / "report.md").read_text()
    assert f"## ❌ Not explained by the ledger: {cause_count_line(group_causes(failed))}" in report
    assert f"**Shrunk to:** `{minimal}`" in report and report.count(f"`{minimal}`") == 2  # and its repro
    script = tmp_path / "repro.py"
    script.write_text(record.repro)
    repro = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT)},
    )
    # Standalone: exit 1 while the bug is present, the same worst element as the record.
    assert repro.returncode == 1, repro.stderr[-2000:]
    metric = record.metrics[0]
    where = ", ".join(map(str, metric.worst_index))
    assert f"out[{where}]: got {metric.worst_subject!r}" in repro.stdout
    assert "OUT OF TOLERANCE" in repro.stdout and "import conformance" not in record.repro


def test_xdist_gives_the_same_records_as_one_process(tmp_path, exact_run):
    (serial_done, serial), parallel = exact_run, tmp_path / "parallel"
    assert serial_done.returncode == 0
    done = run_suite(parallel, toy("exact"), "-k", SMALL, "-n", "2")
    assert done.returncode == 0, done.stdout[-3000:]
    one = {r.key: r.verdict for r in read_results(serial).results}
    two = {r.key: r.verdict for r in read_results(parallel).results}
    assert one == two and one


def test_resume_skips_what_is_recorded(tmp_path):
    assert run_suite(tmp_path, toy("exact"), "-k", "test_forward and " + SMALL).returncode == 0
    assert not (tmp_path / "ratio-vs-length.png").exists()  # --no-plots (the tests' default)
    first = read_results(tmp_path).results
    again = run_suite(tmp_path, toy("exact"), "-k", "(test_forward or test_lse) and " + SMALL, "--resume")
    assert again.returncode == 0
    assert "deselected" in again.stdout
    results = read_results(tmp_path)
    assert results.complete and results.header["resumed"] is False  # the first header is kept
    assert {r.key for r in first} < {r.key for r in results.results}
    assert {r.check for r in results.results} == {"forward", "lse"}


def test_a_selection_that_leaves_no_check_exits_6_as_it_says(tmp_path):
    """pytest's own code for it is 5 (nothing collected); the line said 6. One outcome, one code."""
    done = run_suite(tmp_path, toy("exact"), "-k", "no_check_is_called_this", isolated=True)
    assert done.returncode == EXIT_NOTHING_CHECKED, done.stdout[-3000:]
    assert "conformance: NOT RUN: nothing was checked (exit 6)" in done.stdout
    assert "no planned check was selected" in done.stdout


def test_a_run_that_checks_nothing_exits_6_and_says_not_run(tmp_path):
    """Every selected subject unavailable: no green. Exit 6 (pytest uses 0-5), NOT RUN with the
    reason in report.md and on the terminal, and the gate refuses the folder in one line."""
    done = run_suite(tmp_path, toy("Elsewhere"))
    assert done.returncode == EXIT_NOTHING_CHECKED == 6, done.stdout[-3000:]
    assert "conformance: NOT RUN: nothing was checked (exit 6)" in done.stdout
    verdict = (tmp_path / "report.md").read_text().splitlines()[2]
    assert verdict == f"**⛔ NOT RUN: nothing was checked** — **elsewhere**: unavailable: {Elsewhere.REASON}."
    gate = subprocess.run(
        [sys.executable, "-m", "reports", "gate", str(tmp_path), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gate.returncode == 2 and gate.stdout == ""
    (line,) = gate.stderr.strip().splitlines()
    assert "NOT RUN, nothing was checked (elsewhere: unavailable: " in line and "cannot be compared" in line


def test_a_mixed_run_is_judged_on_what_ran(tmp_path):
    """One subject unavailable, one running: today's exit code for what ran, the rest listed."""
    done = run_suite(tmp_path, toy("exact"), "--impl", f"{toy('exact')},{toy('Elsewhere')}", "-k", SMALL)
    assert done.returncode == 0, done.stdout[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert report.splitlines()[2].startswith("**✅ PASS** — all ")
    assert "not checked here: elsewhere (see below)" in report.splitlines()[2]
    assert f"- 🚫 **elsewhere** — not checked: unavailable: {Elsewhere.REASON}" in report
    failing = run_suite(
        tmp_path / "red",
        toy("scaled_wrong"),
        "--impl",
        f"{toy('scaled_wrong')},{toy('Elsewhere')}",
        "-k",
        "test_forward and float32-full-B1-Hq1-Hkv1-Sq128-Sk128-D64",
    )
    assert failing.returncode == 1, failing.stdout[-3000:]


def test_the_exit_status_tells_nothing_checked_from_a_pass():
    from conformance.harness.plugin import _exit_status
    from tests.support.report_folders import result

    unavailable = result("gone", "forward", "unavailable", ratio=None, reason="no GPU")
    unsupported = result("flash", "forward", "unsupported", ratio=None, reason="no window")
    passed, failed = result("flash", "lse"), result("flash", "backward", "fail", ratio=9.0)
    assert _exit_status((unavailable, unsupported), [], False, False) == EXIT_NOTHING_CHECKED
    assert _exit_status((), [], False, False) == EXIT_NOTHING_CHECKED
    assert _exit_status((unavailable, passed), [], False, False) == 0  # judged on what ran
    assert _exit_status((unavailable, passed, failed), [], False, False) == 1
    assert _exit_status((unavailable,), [], False, True) == 1  # interrupted stays interrupted's code


def test_a_subjects_warnings_are_recorded_and_shown_once_each_under_its_line(tmp_path):
    """Its module's DeprecationWarning on import (as JAX's Pallas GPU attention ops warn from 0.11.2)
    and a FutureWarning at every call: in every record, in summary.json, once each in report.md."""
    impl = "tests.support.warning_subjects:exact_but_warns"
    done = run_suite(tmp_path, impl, "-k", "test_forward and " + SMALL)
    assert done.returncode == 0, done.stdout[-3000:]
    imported = (
        "DeprecationWarning: tests.support.warning_subjects is deprecated; "
        "use tests.support.toy_subjects instead"
    )
    called = "FutureWarning: exact_but_warns: the alignment keyword will change its default"
    ran = [r for r in read_results(tmp_path).results if r.verdict == "pass"]
    assert ran and all(r.availability["warnings"] == [imported, called] for r in ran)
    (subject,) = json.loads((tmp_path / "summary.json").read_text())["subjects"]
    assert subject["warnings"] == [imported]
    report = (tmp_path / "report.md").read_text()
    assert report.count(f"  - ⚠️ {imported}\n") == 1 and report.count(f"  - ⚠️ {called}\n") == 1

"""Meta-tests of the controller-side recorder: one record per test, errors for crashed or
broken tests, summary and footer at the end."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from conformance.harness import recording
from conformance.judge.runner import case_description
from conformance.plan.cases import INPUT_KINDS, Case
from run_records.results_file import CaseResult, read_results


@dataclasses.dataclass
class Report:
    """The fields of pytest's TestReport the recorder reads."""

    nodeid: str
    when: str
    outcome: str
    user_properties: list = dataclasses.field(default_factory=list)
    longreprtext: str = ""


CASE = Case("toy", "float32")
NODE = f"conformance/test_forward.py::test_forward[{CASE.case_id}]"


def _recorder(tmp_path, lookup=lambda check, case_id: None):
    return recording.Recorder(tmp_path, {"profile": "ci"}, resume=False, lookup=lookup)


def _result(verdict="pass") -> CaseResult:
    return CaseResult(case=case_description(CASE), check="forward", verdict=verdict, features=("forward",))


def test_a_result_property_is_written_once(tmp_path):
    rec = _recorder(tmp_path)
    report = Report(NODE, "call", "passed", [recording.result_property(_result())])
    rec.on_report(Report(NODE, "setup", "passed"))
    rec.on_report(report)
    rec.on_report(report)
    rec.on_report(Report(NODE, "teardown", "passed"))
    rec.finish({"schema": 1}, interrupted=False)
    results = read_results(tmp_path)
    assert results.complete and [r.verdict for r in results.results] == ["pass"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["counts"] == {"pass": 1} and summary["complete"] is True


def test_a_test_that_died_mid_call_is_an_error_naming_its_case(tmp_path):
    rec = _recorder(tmp_path)
    case_prop = recording.case_property(case_description(CASE), "forward")
    rec.on_report(Report(NODE, "call", "failed", [case_prop], "Traceback...\nZeroDivisionError: boom"))
    rec.finish({}, interrupted=False)
    (result,) = read_results(tmp_path).results
    assert result.verdict == "error" and "ZeroDivisionError: boom" in result.reason
    assert result.case.case_id == CASE.case_id and result.check == "forward"


def test_a_crashed_xdist_worker_is_an_error_found_through_the_catalogue(tmp_path):
    def lookup(check: str, case_id: str):
        return case_description(CASE) if case_id == CASE.case_id else None

    rec = _recorder(tmp_path, lookup=lookup)
    rec.on_report(Report(NODE, "???", "failed", [], "worker 'gw0' crashed while running"))
    rec.finish({}, interrupted=True)
    results = read_results(tmp_path)
    assert not results.complete
    (result,) = results.results
    assert result.verdict == "error" and "crashed" in result.reason and result.case.q_len == 128


def test_pytest_own_skips_and_other_tests_write_nothing(tmp_path):
    rec = _recorder(tmp_path)
    rec.on_report(Report("conformance/test_raises.py::test_raises[NOTSET]", "setup", "skipped"))
    rec.on_report(Report("tests/test_other.py::test_x", "call", "failed"))
    rec.finish({}, interrupted=False)
    assert read_results(tmp_path).results == ()


def test_node_ids_parse_into_check_and_case():
    assert recording.parse_node_id(NODE) == ("forward", CASE.case_id)
    assert recording.parse_node_id("x.py::test_no_mutation[a-b[c]]") == ("no_mutation", "a-b[c]")
    assert recording.parse_node_id("x.py::helper") is None


def test_cases_that_share_a_compiled_kernel_run_side_by_side(tmp_path):
    """Collection order: each compile group (same case but for the kind of values) is one run of
    consecutive items, each case's checks consecutive inside it (xdist's `load` keeps chunks of
    consecutive items on one worker, so the jit cache is hit there too)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance",
            "--impl",
            "tpu_flash,xla",
            "--report-dir",
            str(tmp_path),
            "--collect-only",
            "-q",
            "-n",
            "0",
            "--no-progress",
        ],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    keys = [recording.parse_node_id(line) for line in done.stdout.splitlines() if "::test_" in line]
    kinds = tuple(f"-{kind}" for kind in INPUT_KINDS if kind != "normal")
    groups = [
        case_id.removesuffix(next((k for k in kinds if case_id.endswith(k)), "")) for _, case_id in keys
    ]
    cases = [case_id for _, case_id in keys]
    assert len(set(groups)) < len(set(cases))  # some groups do hold several kinds of values

    def runs(sequence):
        return [value for i, value in enumerate(sequence) if i == 0 or sequence[i - 1] != value]

    assert len(runs(groups)) == len(set(groups))
    assert len(runs(cases)) == len(set(cases))

"""Meta-tests of the controller-side recorder: one record per test, errors for crashed or
broken tests, summary and footer at the end."""

from __future__ import annotations

import dataclasses
import json

from conformance.harness import recording
from conformance.judge.runner import case_description
from conformance.plan.cases import Case
from reports.records import CaseResult, read_results


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

"""Results on their way from a test to ``results.jsonl``, safe under pytest-xdist.

A test attaches its ``CaseResult`` as JSON to ``item.user_properties`` (which xdist
ships from workers to the controller with each report, and junitxml writes out as
properties). Only the controller writes: ``Recorder.on_report`` appends each record
through ``run_records.results_file.ResultsWriter`` as soon as the report arrives. A report with
no record (a suite error, a crashed worker, a timeout) becomes verdict ``error`` with
the reason taken from the report.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from run_records.results_file import (
    SUMMARY_FILE,
    VERDICTS,
    CaseDescription,
    CaseResult,
    ResultsWriter,
    case_result_from_json,
    case_result_to_json,
    read_results,
    write_json_atomic,
)

RESULT_PROPERTY = "conformance_result"
CASE_PROPERTY = "conformance_case"
_WORKER_LINE = re.compile(r"^\[gw\d+\] \S+ -- Python ")
_NODE_ID = re.compile(r"::test_(?P<check>\w+)\[(?P<case_id>.*)\]$")


def result_property(result: CaseResult) -> tuple[str, str]:
    return RESULT_PROPERTY, json.dumps(case_result_to_json(result), allow_nan=True)


def case_property(
    description: CaseDescription, check: str, features: tuple[str, ...] = ()
) -> tuple[str, str]:
    """Attached at the start of a test, so even a test that dies mid-call names its case
    (and its grid columns, so the error shows in the report's grid)."""
    return CASE_PROPERTY, json.dumps(
        {"check": check, "case": description.__dict__, "features": list(features)}, allow_nan=True
    )


def _property(report: Any, name: str) -> str | None:
    for key, value in getattr(report, "user_properties", ()) or ():
        if key == name:
            return value
    return None


def parse_node_id(nodeid: str) -> tuple[str, str] | None:
    """``.../test_forward.py::test_forward[<case id>]`` -> ("forward", "<case id>")."""
    match = _NODE_ID.search(nodeid)
    return (match["check"], match["case_id"]) if match else None


def _failure_text(report: Any) -> str:
    text = str(getattr(report, "longreprtext", "") or getattr(report, "longrepr", "") or "")
    # xdist heads a worker's report with "[gw0] linux -- Python ...": where, not what.
    lines = [line for line in text.strip().splitlines() if line.strip() and not _WORKER_LINE.match(line)]
    # The last lines of a traceback name the exception; a crash report is a single line.
    return "\n".join(lines[-6:]) if lines else f"test {report.outcome} without a result record"


class Recorder:
    """Controller-side writer: one per session, appends one record per finished test."""

    def __init__(
        self,
        folder: Path,
        header: dict[str, Any],
        *,
        resume: bool,
        lookup: Callable[[str, str], CaseDescription | None],
        amend: Callable[[CaseResult], CaseResult] = lambda result: result,
    ):
        self.folder = Path(folder)
        self.amend = amend  # the ledger, for records the controller writes itself (crashes)
        self.writer = ResultsWriter(self.folder, header, append=resume)
        self.lookup = lookup
        self.counts: Counter[str] = Counter()
        self.started = time.time()
        self._written: set[tuple[str, str, str]] = set()

    def on_report(self, report: Any) -> CaseResult | None:
        """Handle one ``pytest_runtest_logreport``; writes at most one record per test and
        returns it (None when this report wrote nothing)."""
        record = self._record(report)
        if record is None or record.key in self._written:
            return None
        record = self.amend(record)
        self._written.add(record.key)
        self.writer.append(record)
        self.counts[record.verdict] += 1
        return record

    def _record(self, report: Any) -> CaseResult | None:
        raw = _property(report, RESULT_PROPERTY)
        if raw is not None and report.when not in ("setup", "teardown"):  # the call, or xdist's crash report
            return case_result_from_json(json.loads(raw))
        phase_failed = report.when == "setup" and report.outcome == "failed"  # a setup skip is pytest's
        crashed = report.when not in ("setup", "call", "teardown")  # xdist's report for a dead worker
        teardown_failed = report.when == "teardown" and report.outcome == "failed"
        if not (report.when == "call" or phase_failed or crashed or teardown_failed):
            return None
        return self._error_record(report)

    def _error_record(self, report: Any) -> CaseResult | None:
        raw = _property(report, CASE_PROPERTY)
        if raw is not None:
            data = json.loads(raw)
            check = data["check"]
            features = tuple(data.get("features", ()))
            description = CaseDescription(
                **{k: tuple(v) if isinstance(v, list) else v for k, v in data["case"].items()}
            )
        else:
            parsed = parse_node_id(report.nodeid)
            if parsed is None:
                return None  # not a conformance check (e.g. a meta-test collected alongside)
            check, case_id = parsed
            features = ()
            description = self.lookup(check, case_id) or CaseDescription(
                case_id=case_id,
                subject=case_id.split("-")[0],
                dtype="?",
                batch=0,
                q_heads=0,
                kv_heads=0,
                q_len=0,
                kv_len=0,
                head_dim=0,
                v_head_dim=0,
            )
        if report.when == "call" and report.outcome == "skipped":
            return None  # a skip without a record is pytest's own (e.g. -x); nothing ran
        phase = "" if report.when not in ("setup", "call", "teardown") else f"[{report.when}] "
        return CaseResult(
            case=description,
            check=check,
            verdict="error",
            features=features,
            reason=phase + _failure_text(report),
        )

    def finish(
        self, summary: dict[str, Any], interrupted: bool, results: tuple[CaseResult, ...] | None = None
    ) -> dict[str, Any]:
        """Write summary.json; close results.jsonl with a footer unless the run was interrupted.
        ``results``: the file's records as the caller just read them (12,623 records take a second
        to read at ``--impl all``); None reads them."""
        all_counts = self._file_counts(results)
        footer = {"counts": dict(self.counts), "duration_s": round(time.time() - self.started, 3)}
        summary = {**summary, **footer, "counts_all_runs": all_counts, "complete": not interrupted}
        write_json_atomic(self.folder / SUMMARY_FILE, summary)
        if interrupted:
            self.writer.close()
        else:
            self.writer.finish(footer)
        return summary

    def _file_counts(self, results: tuple[CaseResult, ...] | None) -> dict[str, int]:
        """Verdict counts over the whole file (this run plus any resumed earlier run)."""
        if results is None:
            results = read_results(self.writer.path).results
        counts = Counter(r.verdict for r in results)
        return {v: counts.get(v, 0) for v in VERDICTS}

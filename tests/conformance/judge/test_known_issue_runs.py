"""The known-issue ledger end to end: a run whose every failure is known exits 0 and keeps each
record whole; an entry can never excuse what it does not select; stale and fixed entries are
reported, and --strict-known makes them fatal. Tiny NumPy subjects, in a subprocess."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from reports.run_report.grouping import group_causes, known_count_line, template_id
from run_records.results_file import read_results
from tests.support.suite import run_suite, toy

FORWARD_CASE = "test_forward and float32-full-B1-Hq1-Hkv1-Sq128-Sk128-D64"
WRONG = toy("scaled_wrong")


def ledger(tmp_path: Path, *entries: str) -> str:
    path = tmp_path / "ledger.toml"
    path.write_text("\n".join(entries))
    return str(path)


def ran(folder: Path, check: str) -> list:
    return [r for r in read_results(folder).results if r.check == check and r.verdict != "unsupported"]


def statuses(folder: Path) -> dict[str, dict]:
    """This test's entries (the built-in ledger's are there too, "not run here")."""
    summary = json.loads((folder / "summary.json").read_text())
    return {
        s["id"]: s
        for s in summary["known_issues"]
        if s["source"].endswith("ledger.toml") and "kernels" not in s["source"]
    }


def entry(entry_id: str, subject: str, checks: str, extra: str = "") -> str:
    return (
        f'[[issue]]\nid = "{entry_id}"\nsubject = "{subject}"\nchecks = {checks}\n'
        f'link = "https://github.com/example/kernels/issues/1"\n'
        f'summary = "scale applied twice"\n{extra}\n'
    )


def test_a_run_whose_every_failure_is_known_exits_0_and_keeps_the_record(tmp_path):
    file = ledger(tmp_path, entry("wrong-scale", WRONG, '["forward"]', 'cases = ["*-full-*"]'))
    # Shrinking on: a known failure is not shrunk (its smallest case is the entry's), where an
    # unexplained one is (test_end_to_end's mutant run shows the other side).
    done = run_suite(tmp_path, toy("scaled_wrong"), "-k", FORWARD_CASE, "--known-issues", file, shrink=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "xfail" in done.stdout.lower() and "known issue wrong-scale" in done.stdout
    forward = ran(tmp_path, "forward")
    assert forward and {r.verdict for r in forward} == {"known"}
    record = forward[0]
    assert record.known_issue == {
        "id": "wrong-scale",
        "link": "https://github.com/example/kernels/issues/1",
        "summary": "scale applied twice",
    }
    assert record.metrics and record.metrics[0].ratio > 10 and record.repro  # nothing of the record is lost
    assert "Shrunk to a smaller failing case" not in record.reason
    status = statuses(tmp_path)["wrong-scale"]
    assert status["status"] == "reproduced"
    assert status["matched"] == sorted(f"forward[{r.case.case_id}]" for r in forward)
    report = (tmp_path / "report.md").read_text()
    assert f"🐞 Known issues: {known_count_line(group_causes(forward))}" in report and "wrong-scale" in report
    assert all(f"`{template_id(r.case.case_id, r.case.dtype)}`" in report for r in forward)  # its cases
    assert "example/kernels#1" in report and "PASS" in report.splitlines()[2]


def test_an_entry_never_excuses_a_failure_it_does_not_select(tmp_path):
    """The control no ledger may mask: the entry names lse and other cases, the forward failure stays red."""
    file = ledger(
        tmp_path,
        entry("other-check", WRONG, '["lse"]'),
        entry("other-case", WRONG, '["forward"]', 'cases = ["*-causal_tl-*"]'),
        entry("other-dtype", WRONG, '["forward"]', 'dtype = "bfloat16"'),
    )
    done = run_suite(tmp_path, toy("scaled_wrong"), "-k", FORWARD_CASE, "--known-issues", file)
    assert done.returncode == 1
    forward = ran(tmp_path, "forward")
    assert forward and all(r.verdict == "fail" and r.known_issue == {} for r in forward)


def test_an_entry_outside_its_jax_range_excuses_nothing_and_says_it_would_have(tmp_path):
    file = ledger(tmp_path, entry("old-only", WRONG, '["forward"]', 'jax = "<0.1"'))
    done = run_suite(tmp_path, toy("scaled_wrong"), "-k", FORWARD_CASE, "--known-issues", file)
    assert done.returncode == 1
    failing = sum(r.verdict == "fail" for r in read_results(tmp_path).results)
    assert failing and f"would explain {failing} failures here, outside its range" in done.stdout
    status = statuses(tmp_path)["old-only"]
    assert status["status"] == "out of range" and status["failing_outside_range"] == failing


def test_an_entry_applies_only_where_its_jax_and_its_tokamax_ranges_both_hold(tmp_path):
    try:
        tokamax = importlib.metadata.version("tokamax")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tokamax is not installed here (the tests group installs it)")
    file = ledger(
        tmp_path,
        entry("other-tokamax", WRONG, '["forward"]', 'tokamax = "<0.0.1"'),  # first: must not match
        entry("this-tokamax", WRONG, '["forward"]', f'jax = ">=0.4"\ntokamax = "=={tokamax}"'),
    )
    # Shrinking on: a known failure is not shrunk (its smallest case is the entry's), where an
    # unexplained one is (test_end_to_end's mutant run shows the other side).
    done = run_suite(tmp_path, toy("scaled_wrong"), "-k", FORWARD_CASE, "--known-issues", file, shrink=True)
    assert done.returncode == 0, done.stdout[-3000:]
    forward = ran(tmp_path, "forward")
    assert forward and {r.known_issue["id"] for r in forward} == {"this-tokamax"}
    seen = statuses(tmp_path)
    assert (
        seen["this-tokamax"]["status"] == "reproduced" and seen["this-tokamax"]["tokamax"] == f"=={tokamax}"
    )
    assert seen["other-tokamax"]["status"] == "out of range"
    assert seen["other-tokamax"]["failing_outside_range"] == 0  # another in-range entry explains them
    # nor clean evidence: its checks failed (as the other defect), they did not pass
    assert seen["other-tokamax"]["ran_outside_range"] == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["environment"]["tokamax"] == tokamax  # the run records the tokamax that ran


def test_fixed_and_stale_entries_are_reported_and_strict_known_makes_them_fatal(tmp_path):
    exact = toy("exact")
    file = ledger(
        tmp_path,
        entry("fixed", exact, '["forward"]'),
        entry("typo", exact, '["forward"]', 'cases = ["*-Sq9999-*"]'),
    )
    done = run_suite(tmp_path, toy("exact"), "-k", FORWARD_CASE, "--known-issues", file)
    assert done.returncode == 0, done.stdout[-3000:]
    found = {entry_id: s["status"] for entry_id, s in statuses(tmp_path).items()}
    # -k left the typo's (nonexistent) cases out, so it is only "not run here"; without -k it is
    # "stale" (tests/reports/ledger/test_known_issues.py)
    assert found == {"fixed": "no longer reproduces", "typo": "not run here"}
    assert "known issue fixed no longer reproduces" in done.stdout and "known issue typo" not in done.stdout
    strict = run_suite(
        tmp_path / "strict", toy("exact"), "-k", FORWARD_CASE, "--known-issues", file, "--strict-known"
    )
    assert strict.returncode == 1


def test_a_bad_ledger_stops_the_run_in_one_line_naming_the_file_and_entry(tmp_path):
    file = ledger(tmp_path, entry("a", WRONG, '["forwards"]'))
    done = run_suite(tmp_path, toy("scaled_wrong"), "--known-issues", file)
    assert done.returncode == 4  # pytest's usage error: nothing ran
    error = [line for line in done.stderr.splitlines() if "ledger.toml" in line]
    assert len(error) == 1 and "entry 'a'" in error[0] and "unknown check(s) ['forwards']" in error[0]
    assert not (tmp_path / "results.jsonl").exists()

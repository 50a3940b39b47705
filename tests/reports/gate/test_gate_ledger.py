"""The gate and the ledger, behaviour changes and flaky results: a known issue never excuses a
check the base passed; an observed behaviour that changes fails unless allowed; flaky is listed only."""

from __future__ import annotations

import dataclasses

from reports.__main__ import main
from reports.gate.findings import EXIT_PASS, EXIT_REGRESSION
from tests.support.report_folders import standard_results, with_verdict, write_run

ISSUE = {"id": "nan-segments", "link": "https://github.com/jax-ml/jax/issues/1", "summary": "NaN leaks"}


def _segment_check(results):
    return next(
        r
        for r in results
        if "segment_ids" in r.features and r.case.subject == "flash" and r.case.dtype == "float32"
    )


def _known(result):
    return dataclasses.replace(with_verdict(result, "fail", 9.0), verdict="known", known_issue=ISSUE)


def _gate(tmp_path, capsys, base, candidate, *options):
    code = main(
        [
            "gate",
            str(write_run(tmp_path / "jax-0.9.2", base, jax="0.9.2")),
            str(write_run(tmp_path / "jax-0.10.2", candidate)),
            *options,
        ]
    )
    return code, capsys.readouterr().out


def test_a_check_the_base_passed_fails_the_gate_even_when_the_ledger_knows_it(tmp_path, capsys):
    base = standard_results()
    code, out = _gate(tmp_path, capsys, base, standard_results(extra=[_known(_segment_check(base))]))
    assert code == EXIT_REGRESSION
    assert "### ❌ Newly failing: 1 root cause (1 failing check in 1 case)" in out
    assert (
        "| pass | known | known issue [nan-segments](https://github.com/jax-ml/jax/issues/1); out: ratio 9"
    ) in out


def test_a_known_issue_in_both_runs_is_no_regression(tmp_path, capsys):
    known = _known(_segment_check(standard_results()))
    code, out = _gate(tmp_path, capsys, standard_results(extra=[known]), standard_results(extra=[known]))
    assert code == EXIT_PASS, out


def test_the_gate_lists_known_issues_the_candidate_fixes(tmp_path, capsys):
    base = standard_results()
    code, out = _gate(tmp_path, capsys, standard_results(extra=[_known(_segment_check(base))]), base)
    assert code == EXIT_PASS
    assert "### ✅ Fixed: 1 root cause (1 check in 1 case)" in out and "was known issue [nan-segments]" in out
    assert "The candidate fixes known issue [nan-segments]" in out


def test_a_known_issue_the_candidate_still_fails_unexplained_is_named_not_a_regression(tmp_path, capsys):
    """The tokamax gate 0.10.2 -> 0.12.0.1: the float16 entry was bounded too early, so the candidate
    errored on its checks unexplained; the gate passed without a word about it."""
    check = _segment_check(standard_results())
    still = dataclasses.replace(with_verdict(check, "fail", 9.0), verdict="error")
    base, candidate = standard_results(extra=[_known(check)]), standard_results(extra=[still])
    code, out = _gate(tmp_path, capsys, base, candidate)
    assert code == EXIT_PASS, out
    assert "⚠️ 1 check of known issue [nan-segments]" in out and "still fail in the candidate" in out


def _observed(result, **observed):
    return dataclasses.replace(result, observed=observed)


def test_a_change_of_observed_behaviour_fails_unless_allowed(tmp_path, capsys):
    check = _segment_check(standard_results())
    base = standard_results(extra=[_observed(check, fully_masked_out="mean_v")])
    cand = standard_results(extra=[_observed(check, fully_masked_out="nan")])
    code, out = _gate(tmp_path, capsys, base, cand)
    assert code == EXIT_REGRESSION
    assert "### ❌ Behaviour changes (where the semantics are open) (1)" in out
    assert "· fully_masked_out | mean_v | nan | pass → pass |" in out
    code, out = _gate(tmp_path / "allowed", capsys, base, cand, "--allow-behaviour-change")
    assert code == EXIT_PASS and "1 behaviour change allowed" in out


def test_the_same_behaviour_on_both_sides_is_no_change(tmp_path, capsys):
    check = _observed(_segment_check(standard_results()), fully_masked_out="mean_v", fully_masked_lse="-inf")
    code, out = _gate(tmp_path, capsys, standard_results(extra=[check]), standard_results(extra=[check]))
    assert code == EXIT_PASS, out


def test_flaky_results_are_listed_and_never_a_regression(tmp_path, capsys):
    base = standard_results()
    flaky = dataclasses.replace(
        with_verdict(_segment_check(base), "pass", 1.1),
        verdict="flaky",
        details={"first_attempt": "worker gw0: killed by SIGSEGV"},
    )
    code, out = _gate(tmp_path, capsys, base, standard_results(extra=[flaky]))
    assert code == EXIT_PASS, out
    assert "### 🎲 Flaky in the candidate (1, not counted)" in out and "killed by SIGSEGV" in out

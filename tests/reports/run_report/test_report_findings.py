"""report.md shows each root cause once, stays within a review comment's size (details.md beside it),
and the gate and the matrix count root causes the same way."""

from __future__ import annotations

import dataclasses

import pytest

from reports.__main__ import main
from reports.gate.comparison import gate
from reports.gate.findings import EXIT_REGRESSION
from reports.matrix_report.version_matrix import discover, load_matrix, render_matrix
from reports.run_report.render import DETAILS_FILE, MAX_CHARS, repro_path, write_report
from tests.support.report_folders import result, standard_results, with_verdict, write_run

CHECKS = ("forward", "lse", "finite", "fully_masked")
DTYPES = ("float32", "bfloat16")


def case_id(subject: str, dtype: str) -> str:
    return f"{subject}-{dtype}-causal_tl-B2-Hq4-Hkv4-Sq129-Sk129-D64"


def template(subject: str) -> str:
    return f"`{subject}-*-causal_tl-B2-Hq4-Hkv4-Sq129-Sk129-D64`"


def one_cause(subject: str = "flash", *, verdict: str = "fail", repro_lines: int = 3, **extra):
    """One case failing forward, lse, finite and fully_masked in float32 and bfloat16: 8 checks."""
    script = "\n".join(f"print('{subject} repro line {n}')  # rebuilds the case" for n in range(repro_lines))
    members = []
    for check in CHECKS:
        for dtype in DTYPES:
            r = result(subject, check, "fail", dtype=dtype, length=129, ratio=6.0, causal=True)
            r = dataclasses.replace(
                r,
                case=dataclasses.replace(r.case, case_id=case_id(subject, dtype)),
                verdict=verdict,
                reason=f"{check}: out of tolerance",
                repro=f"# {subject} {check} {dtype}\n{script}\n",
                **extra,
            )
            members.append(r)
    return members


def passing(subject: str):
    return [result(subject, c, dtype=d, length=128) for c in CHECKS for d in DTYPES]


KNOWN_A = {"id": "entry-a", "link": "https://github.com/example/kernels/issues/3", "summary": "a"}
KNOWN_B = {"id": "entry-b", "link": "https://github.com/example/kernels/issues/4", "summary": "b"}


def test_one_cause_is_one_row_with_one_repro(tmp_path):
    folder = write_run(tmp_path / "jax-0.10.2", [*standard_results(), *one_cause()])
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "**❌ FAIL** — 1 root cause not explained by the ledger (8 failing checks in 2 cases);" in text
    assert "## ❌ Not explained by the ledger: 1 root cause (8 failing checks in 2 cases)" in text
    summary = "forward, lse, fully_masked, finite fail in float32 and bfloat16"  # the checks in report order
    assert f"| 1 | flash | {summary} | 2 (8 checks) | `{case_id('flash', 'bfloat16')}` |" in text
    assert text.count("flash repro line 0") == 1 and text.count("<details><summary>1. flash") == 1
    assert not (folder / DETAILS_FILE).exists()


def _planted(subject: str = "flash"):
    """Two ledger entries matching ten cases each, and one unexplained failure shared by five cases
    (the same check and message, other numbers): three root causes."""
    base = [result(subject, "forward", dtype="float32", length=128, seed=s) for s in range(25)]

    def failing(r, verdict, reason, issue=None):
        failed = with_verdict(r, "fail", 6.0 + r.case.seed, reason=reason)
        return dataclasses.replace(failed, verdict=verdict, known_issue=issue or {})

    planted = [failing(r, "known", f"a: off by {r.case.seed}", KNOWN_A) for r in base[:10]]
    planted += [failing(r, "known", f"b: nan at [{r.case.seed}, 0]", KNOWN_B) for r in base[10:20]]
    planted += [
        failing(r, "fail", f"out: OUT OF TOLERANCE; max-abs {r.case.seed / 7:.3g} at [0, {r.case.seed}, 3]")
        for r in base[20:]
    ]
    return base, planted


def test_two_ledger_entries_and_one_unexplained_failure_are_three_root_causes(tmp_path, capsys):
    """report.md, the gate and the matrix all count the same three causes."""
    base, planted = _planted()
    before = write_run(tmp_path / "jax-0.9.2", base, jax="0.9.2")
    after = write_run(tmp_path / "jax-0.10.2", planted)
    text = write_report(after, plots=False).read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[2].startswith(
        "**❌ FAIL** — 1 root cause not explained by the ledger (5 failing checks in 5 cases)"
    )
    assert "20 known failures from 2 known issues" in lines[2]
    table = [line for line in lines if line.startswith("| 1 | flash |")]
    assert len(table) == 1 and "| forward fails in float32 | 5 | `float32-L128-full-nomask-s20` |" in table[0]
    assert "<details><summary>🐞 Known issues: 20 known failures from 2 known issues</summary>" in text
    for entry, smallest in (("entry-a", "s0"), ("entry-b", "s10")):
        row = next(line for line in lines if line.startswith(f"| 🐞 reproduced | `{entry}` |"))
        assert f"| 10: forward fails in float32 | `float32-L128-full-nomask-{smallest}` |" in row
        assert f"<details><summary>{entry}: its 10 cases</summary>" in text
    # The gate: the same three causes, one row each, one repro command each.
    assert main(["gate", str(before), str(after)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "## ❌ Upgrade gate: FAIL — 3 regressions in" in out
    assert "### ❌ Newly failing: 3 root causes (25 failing checks in 25 cases)" in out
    rows = [line for line in out.splitlines() if line.startswith("| flash | forward (float32) · ")]
    assert len(rows) == 3 and all("`python " in row for row in rows)
    assert sum("known issue `entry-" in row for row in rows) == 2
    # The matrix: one unexplained cause at 0.10.2, its row along the versions; the ledger's two.
    matrix = render_matrix(load_matrix(discover(tmp_path)))
    assert matrix.splitlines()[2].startswith(
        "**❌ FAILURES** in 1 version of 2 JAX versions (0.9.2 … 0.10.2): "
        "0.10.2: 1 root cause (5 failing checks in 5 cases); 🐞 20 known failures from 2 known issues"
    )
    assert (
        "| flash | forward (float32) | 5 cases, smallest `float32-L128-full-nomask-s20` | ✅ | ❌ 5 |"
        in matrix
    )


def test_twenty_failing_subjects_fit_a_review_comment_with_details_beside(tmp_path):
    subjects = [f"kernel{n:02d}" for n in range(20)]
    results = [r for s in subjects for r in (*one_cause(s, repro_lines=60), *passing(s))]
    folder = write_run(tmp_path / "jax-0.10.2", results)
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    details = (folder / DETAILS_FILE).read_text(encoding="utf-8")
    assert len(details) > MAX_CHARS  # every cause in full would not fit
    assert len(text) <= MAX_CHARS
    assert "## ❌ Not explained by the ledger: 20 root causes (160 failing checks in 40 cases)" in text
    assert f"[{DETAILS_FILE}]({DETAILS_FILE})" in text
    full = text.count(" repro line 59")
    assert 0 < full < 20
    for number, subject in enumerate(subjects, start=1):
        # Once in report.md as a row; in full (folded) in report.md or in details.md.
        in_full = f"<details><summary>{number}. {subject} ·" in text
        row = f"| [{number}]({DETAILS_FILE}#cause-{number}) | {subject} |"
        assert in_full or row in text, subject
        assert in_full == (f"{subject} repro line 59" in text)
        assert f'<a id="cause-{number}"></a>' in details and f"{subject} repro line 59" in details
    # The summary at the top is untouched by the cut.
    assert text.splitlines()[2].startswith("**❌ FAIL** — 20 root causes not explained by the ledger")


def test_a_smaller_rerender_removes_the_stale_details(tmp_path):
    subjects = [f"kernel{n:02d}" for n in range(20)]
    folder = write_run(tmp_path / "jax-0.10.2", [r for s in subjects for r in one_cause(s, repro_lines=60)])
    write_report(folder, plots=False)
    assert (folder / DETAILS_FILE).exists()
    write_run(folder, one_cause("kernel00"))
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "1 root cause (8 failing checks in 2 cases)" in text and not (folder / DETAILS_FILE).exists()
    assert sorted(p.name for p in folder.iterdir()) == ["report.md", "repro", "results.jsonl", "summary.json"]
    kept = {p.relative_to(folder).as_posix() for p in (folder / "repro").glob("*/*.py")}
    assert kept == {repro_path(r) for r in one_cause("kernel00") if r.repro}  # the others' went


def _broken(results, subject="xla"):
    """Two causes in ``subject``: a 129-long case failing forward and backward in both dtypes, and
    a 1000-long case failing forward, plus a 7-long case shrunk to the 129-long one (joins it)."""
    broken = [
        with_verdict(r, "fail", 8.0)
        for r in results
        if r.case.subject == subject
        and (r.case.q_len == 129 or (r.case.q_len == 1000 and r.check == "forward"))
        and (r.case.q_len == 129 or r.case.dtype == "float32")
    ]
    seven = next(
        r for r in results if r.case.subject == subject and r.case.q_len == 7 and r.check == "forward"
    )
    shrunk = dataclasses.replace(
        with_verdict(seven, "fail", 8.0), details={"minimal_case_id": "float32-L129-causal-nomask-s0"}
    )
    return [*broken, shrunk]


def test_the_gate_lists_and_counts_newly_failing_checks_by_root_cause(tmp_path, capsys):
    base_results = standard_results()
    broken = _broken(base_results)
    assert len(broken) == 6
    base = write_run(tmp_path / "jax-0.9.2", base_results, jax="0.9.2")
    cand = write_run(tmp_path / "jax-0.10.2", standard_results(extra=broken))
    assert main(["gate", str(base), str(cand)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "## ❌ Upgrade gate: FAIL — 2 regressions in" in out
    assert "| Newly failing | 2 root causes (6 failing checks in 4 cases) |" in out
    assert "### ❌ Newly failing: 2 root causes (6 failing checks in 4 cases)" in out
    assert (
        "| xla | forward, backward (float32, bfloat16) · 3 cases, smallest float32-L7-causal-nomask-s0 "
        "| pass | fail | worst: forward in float32: out: ratio 8 (k 2) |"
    ) in out
    assert "| xla | forward · float32-L1000-full-nomask-s0 | pass | fail | out: ratio 8 (k 2) |" in out
    # The verdict is the same: every failing check is still a regression of its own.
    result = gate(base, cand)
    assert not result.passed and len(result.regressions) == 6


def test_the_matrix_counts_and_lists_root_causes_by_version(tmp_path):
    base_results = standard_results()
    write_run(tmp_path / "jax-0.9.2", base_results, jax="0.9.2")
    write_run(tmp_path / "jax-0.10.2", standard_results(extra=_broken(base_results)))
    text = render_matrix(load_matrix(discover(tmp_path)))
    assert text.splitlines()[2].startswith(
        "**❌ FAILURES** in 1 version of 2 JAX versions (0.9.2 … 0.10.2): "
        "0.10.2: 2 root causes (6 failing checks in 4 cases)"
    )
    assert "| **xla** | ✅ 26 | ❌ 6/26 · 2 root causes (" in text
    assert "## Failures by version" in text
    assert (
        "| xla | forward, backward (float32, bfloat16) | 3 cases, smallest `float32-L7-causal-nomask-s0` "
        "| ✅ | ❌ 5 |" in text
    )
    assert "| xla | forward (float32) | 1 case, smallest `float32-L1000-full-nomask-s0` | ✅ | ❌ 1 |" in text


@pytest.mark.parametrize("limit", [1_500, 4_000, 8_000, 20_000])
def test_any_limit_holds_and_nothing_is_lost(tmp_path, limit):
    """Tighter limits cut more (the causes in full, the folds after them, the table's rows, at
    last the summary's tail), but report.md never passes the limit and details.md always holds
    every root cause."""
    subjects = [f"kernel{n:02d}" for n in range(6)]
    results = [r for s in subjects for r in one_cause(s, repro_lines=20)]
    results += one_cause("known00", verdict="known", known_issue=KNOWN_A)
    folder = write_run(tmp_path / "jax-0.10.2", [*standard_results(), *results])
    text = write_report(folder, plots=False, max_chars=limit).read_text(encoding="utf-8")
    assert len(text) <= limit
    if (folder / DETAILS_FILE).exists():
        assert f"({DETAILS_FILE})" in text
        details = (folder / DETAILS_FILE).read_text(encoding="utf-8")
    else:  # it all fits
        details = text
    assert text.startswith(
        "# Conformance report · jax 0.10.2\n\n**❌ FAIL** — 6 root causes not explained by the ledger "
        "(48 failing checks in 12 cases);"
    )
    assert all(f"{s} repro line 19" in details for s in subjects)
    assert template("known00") in details


def test_a_report_of_many_subjects_stays_well_under_a_review_comment(tmp_path):
    """Like ``--impl all`` at ci: a dozen subjects, each with passes, two dozen unsupported reasons,
    a known issue over ten cases and an unexplained failure with a long standalone repro script.
    report.md stays under 40,000 characters, and whatever it leaves out is in details.md."""
    results = []
    for n in range(12):
        subject = f"kernel{n:02d}"
        results += passing(subject)
        results += [
            result(subject, "forward", "unsupported", ratio=None, seed=s, reason=f"option {s} not supported")
            for s in range(24)
        ]
        known = [with_verdict(result(subject, "lse", seed=s), "fail", 5.0) for s in range(10)]
        results += [dataclasses.replace(r, verdict="known", known_issue=KNOWN_B) for r in known]
        results += one_cause(subject, repro_lines=120)
    folder = write_run(tmp_path / "jax-0.10.2", results)
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert len(text) < 40_000, len(text)
    details = folder / DETAILS_FILE
    missing = [n for n in range(12) if f"kernel{n:02d} repro line 119" not in text]
    if missing:  # never silently cut: what report.md leaves out is linked and in details.md
        assert f"[{DETAILS_FILE}]({DETAILS_FILE})" in text
        assert all(f"kernel{n:02d} repro line 119" in details.read_text(encoding="utf-8") for n in missing)

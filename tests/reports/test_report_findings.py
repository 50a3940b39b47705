"""report.md shows each finding once, stays within a review comment's size (details.md beside it),
and the gate and the matrix count findings the same way."""

from __future__ import annotations

import dataclasses

import pytest

from reports.__main__ import main
from reports.gate import EXIT_REGRESSION, gate
from reports.matrix import discover, load_matrix, render_matrix
from reports.render import DETAILS_FILE, MAX_CHARS, repro_path, write_report
from tests.reports.synthetic import result, standard_results, with_verdict, write_run

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


def test_one_cause_is_one_finding_with_one_repro(tmp_path):
    folder = write_run(tmp_path / "jax-0.10.2", [*standard_results(), *one_cause()])
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "**❌ FAIL** — 8 of 62 checks failed (1 finding;" in text
    assert "## Failures: 1 finding (8 failing checks)" in text
    summary = "forward, lse, fully_masked, finite fail in float32 and bfloat16"  # the checks in report order
    heading = f"### 1. ❌ flash · {summary} · {template('flash')}"
    assert heading in text and text.count("### ") == 1
    assert text.count("<details><summary>Repro script") == 1 and text.count("flash repro line 0") == 1
    assert "**Failing checks (8):**" in text
    assert all(f"| {c} | {d} | `{case_id('flash', d)}` | ❌ fail |" in text for c in CHECKS for d in DTYPES)
    assert not (folder / DETAILS_FILE).exists()


def test_twenty_failing_subjects_fit_a_review_comment_with_details_beside(tmp_path):
    subjects = [f"kernel{n:02d}" for n in range(20)]
    results = [r for s in subjects for r in (*one_cause(s, repro_lines=60), *passing(s))]
    folder = write_run(tmp_path / "jax-0.10.2", results)
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    details = (folder / DETAILS_FILE).read_text(encoding="utf-8")
    assert len(details) > MAX_CHARS  # every finding in full would not fit
    assert len(text) <= MAX_CHARS
    assert "## Failures: 20 findings (160 failing checks)" in text
    assert f"[{DETAILS_FILE}]({DETAILS_FILE})" in text
    full = text.count("<details><summary>Repro script")
    assert 0 < full < 20 and f"### Further findings ({20 - full})" in text
    for number, subject in enumerate(subjects, start=1):
        # Once in report.md: in full, or as a row of the table that links its full entry.
        assert text.count(template(subject)) == 1, subject
        in_full = f"### {number}. ❌ {subject} ·" in text
        assert in_full or f"| [{number}]({DETAILS_FILE}#finding-{number}) | {subject} |" in text
        assert in_full == (f"{subject} repro line 59" in text)
        # In full in details.md: heading, anchor, every failing check and the whole repro.
        assert f'<a id="finding-{number}"></a>' in details and f"### {number}. ❌ {subject} ·" in details
        assert f"{subject} repro line 59" in details
        assert all(f"`{case_id(subject, d)}`" in details for d in DTYPES)
    assert details.count("<details><summary>Repro script") == 20
    # The summary at the top is untouched by the cut.
    assert text.splitlines()[2].startswith("**❌ FAIL** — 160 of 320 checks failed (20 findings;")


def test_a_smaller_rerender_removes_the_stale_details(tmp_path):
    subjects = [f"kernel{n:02d}" for n in range(20)]
    folder = write_run(tmp_path / "jax-0.10.2", [r for s in subjects for r in one_cause(s, repro_lines=60)])
    write_report(folder, plots=False)
    assert (folder / DETAILS_FILE).exists()
    write_run(folder, one_cause("kernel00"))
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "1 finding (8 failing checks)" in text and not (folder / DETAILS_FILE).exists()
    assert sorted(p.name for p in folder.iterdir()) == ["report.md", "repro", "results.jsonl", "summary.json"]
    kept = {p.relative_to(folder).as_posix() for p in (folder / "repro").glob("*/*.py")}
    assert kept == {repro_path(r) for r in one_cause("kernel00") if r.repro}  # the others' went


def test_known_failures_group_the_same_way(tmp_path):
    issue = {"id": "mask-edge", "link": "https://github.com/example/kernels/issues/3", "summary": "edge"}
    known = one_cause(verdict="known", known_issue=issue)
    folder = write_run(tmp_path / "jax-0.10.2", [*standard_results(), *known])
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "8 failing as known issues in 1 finding (mask-edge; see Known issues)" in text
    assert "## Known issues: 1 finding (8 failing checks) explained" in text
    assert (
        "| 1 finding (8 checks): finite ×2, forward ×2, fully_masked ×2, lse ×2 (bfloat16, float32) |" in text
    )
    summary = "forward, lse, fully_masked, finite fail in float32 and bfloat16"
    row = f"| `mask-edge` | flash | {summary} | {template('flash')} |"
    assert row in text and text.count(template("flash")) == 1


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


def test_the_gate_lists_and_counts_newly_failing_checks_by_finding(tmp_path, capsys):
    base_results = standard_results()
    broken = _broken(base_results)
    assert len(broken) == 6
    base = write_run(tmp_path / "jax-0.9.2", base_results, jax="0.9.2")
    cand = write_run(tmp_path / "jax-0.10.2", standard_results(extra=broken))
    assert main(["gate", str(base), str(cand)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "## ❌ Upgrade gate: FAIL — 2 regressions in" in out
    assert "| Newly failing | 2 findings (6 failing checks) |" in out
    assert "### ❌ Newly failing: 2 findings (6 failing checks)" in out
    assert (
        "| xla | forward, backward (float32, bfloat16) · *-L129-causal-nomask-s0 (+1 more case) · 5 checks "
        "| pass | fail | worst: forward in float32: out: ratio 8 (k 2) |"
    ) in out
    assert "| xla | forward · float32-L1000-full-nomask-s0 | pass | fail | out: ratio 8 (k 2) |" in out
    # The verdict is the same: every failing check is still a regression of its own.
    result = gate(base, cand)
    assert not result.passed and len(result.regressions) == 6


def test_the_matrix_counts_and_lists_findings_by_version(tmp_path):
    base_results = standard_results()
    write_run(tmp_path / "jax-0.9.2", base_results, jax="0.9.2")
    write_run(tmp_path / "jax-0.10.2", standard_results(extra=_broken(base_results)))
    text = render_matrix(load_matrix(discover(tmp_path)))
    assert text.splitlines()[2].startswith(
        "**❌ FAILURES** in 1 version of 2 JAX versions (0.9.2 … 0.10.2): "
        "0.10.2: 2 findings (6 failing checks)"
    )
    assert "| **xla** | ✅ 26 | ❌ 6/26 · 2 findings (" in text
    assert "## Failures by version" in text
    assert (
        "| xla | forward, backward (float32, bfloat16) | `*-L129-causal-nomask-s0 (+1 more case)` "
        "| ✅ | ❌ 5 |" in text
    )
    assert "| xla | forward (float32) | `*-L1000-full-nomask-s0` | ✅ | ❌ 1 |" in text


@pytest.mark.parametrize("limit", [1_500, 4_000, 8_000, 20_000])
def test_any_limit_holds_and_nothing_is_lost(tmp_path, limit):
    """Tighter limits cut more (the table's rows, the sections after it, at last the summary's
    tail), but report.md never passes the limit and details.md always holds every finding."""
    issue = {"id": "mask-edge", "link": "https://github.com/example/kernels/issues/3", "summary": "edge"}
    subjects = [f"kernel{n:02d}" for n in range(6)]
    results = [r for s in subjects for r in one_cause(s, repro_lines=20)]
    results += one_cause("known00", verdict="known", known_issue=issue)
    folder = write_run(tmp_path / "jax-0.10.2", [*standard_results(), *results])
    text = write_report(folder, plots=False, max_chars=limit).read_text(encoding="utf-8")
    details = (folder / DETAILS_FILE).read_text(encoding="utf-8")
    assert len(text) <= limit and f"({DETAILS_FILE})" in text
    assert text.startswith(
        "# Conformance report · jax 0.10.2\n\n**❌ FAIL** — 48 of 110 checks failed (6 findings;"
    )
    assert all(f"{s} repro line 19" in details for s in subjects)
    assert template("known00") in details

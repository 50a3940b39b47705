"""report.md for one run: verdict, grid, environment, failure details, incomplete marker."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest

from reports.__main__ import main
from reports.run_report.render import REPORT_FILE, write_report
from run_records.run_folder import load_run
from tests.support.report_folders import result, standard_results, with_verdict, write_run


def _failing(subject: str = "flash", dtype: str = "bfloat16", length: int = 129):
    base = next(
        r
        for r in standard_results()
        if r.case.subject == subject
        and r.check == "forward"
        and r.case.dtype == dtype
        and r.case.q_len == length
    )
    return with_verdict(base, "fail", 7.3, reason="out: max-abs error over tolerance | see table")


def _render(tmp_path, results, **kwargs) -> str:
    folder = write_run(tmp_path / "jax-0.10.2", results, **kwargs)
    return write_report(folder, plots=False).read_text(encoding="utf-8")


def test_passing_run_fits_one_screen(tmp_path):
    text = _render(tmp_path, standard_results())
    lines = text.splitlines()
    assert lines[0] == "# Conformance report · jax 0.10.2"
    verdict = lines[2]
    assert verdict.startswith("**✅ PASS**")
    assert "all 52 checks that ran passed" in verdict
    assert "1 unsupported" in verdict and "not checked here: gpu_triton" in verdict
    assert lines[4].startswith("Python 3.11.7 · jax 0.10.2 · jaxlib 0.10.2 · numpy 2.4.6 · cpu (cpu)")
    assert "profile ci · seed 0" in lines[4]
    assert "INCOMPLETE" not in text and "Not explained" not in text
    # Then one line per subject, and everything else folded.
    assert lines[6:10] == [
        "- ✅ **flash** — 26 passed · ➖ 1 unsupported",
        "- 🚫 **gpu_triton** — not checked: unavailable: needs a CUDA GPU; none here",
        "- ✅ **xla** — 26 passed",
        "",
    ]
    assert lines[10].startswith("<details>")
    assert lines[10] == "<details><summary>Grid: subjects × features</summary>"  # no ledger here


def _grid_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    grid = text.split("Grid: subjects × features", 1)[1].split("</details>", 1)[0]
    for line in grid.splitlines():
        if line.startswith("| ") and not line.startswith("| :--"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.setdefault(cells[0], cells[1:])
    return rows


def test_grid_has_subject_columns_and_grouped_feature_rows(tmp_path):
    text = _render(tmp_path, standard_results())
    rows = _grid_rows(text)
    assert rows["feature"] == ["**flash**", "**gpu_triton**", "**xla**"]
    labels = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")][2:]
    labels = labels[: labels.index("bfloat16") + 1]
    assert labels == [
        "**all checks**",
        "*checks*",
        "forward",
        "backward",
        "*masks and options*",
        "causal",
        "window",
        "segment ids",
        "*dtypes*",
        "float32",
        "bfloat16",
    ]
    assert rows["**all checks**"] == ["✅ 26", "🚫", "✅ 26"]
    assert rows["window"] == ["➖", "🚫", "·"]  # unsupported (declared) / unavailable / never drawn


def test_failure_row_and_fold_have_case_worst_element_ratio_and_repro(tmp_path):
    text = _render(tmp_path, standard_results(extra=[_failing()]))
    lines = text.splitlines()
    assert lines[2].startswith(
        "**❌ FAIL** — 1 root cause not explained by the ledger (1 failing check in 1 case); 51 checks passed"
    )
    # The first screen: the cause's row, right under the verdict.
    assert lines[6] == "## ❌ Not explained by the ledger: 1 root cause (1 failing check in 1 case)"
    row = (
        "| 1 | flash | forward fails in bfloat16 | 1 | `bfloat16-L129-causal-nomask-s0` | "
        "`out[1, 0, 127, 5]: subject 0.5073, reference 0.5 (error 7.30e-03)` "
        "(3.65× its tolerance, forward) | "
        "`python repro/forward/bfloat16-L129-causal-nomask-s0.py` |"
    )
    assert lines[10] == row
    assert "- ❌ **flash** — 1 failing (1 root cause) · 25 passed · ➖ 1 unsupported" in lines
    assert _grid_rows(text)["**all checks**"][0] == "❌ 1/27"
    section = text[text.index("<details><summary>1. flash · forward fails in bfloat16 · 1 case</summary>") :]
    assert (
        "**Worst case** (forward): `bfloat16-L129-causal-nomask-s0`: "
        "bfloat16, batch 2, 4 heads, q 129 × kv 129" in (section)
    )
    assert (
        "is 3.65× the tolerance 2.00e-03" in section
        and "error ratio to the baseline 7.3 (allowed about 2)" in section
    )
    assert "out: max-abs error over tolerance \\| see table" in section  # a pipe cannot break the layout
    assert "**Repro** (`repro/forward/bfloat16-L129-causal-nomask-s0.py`, beside this report)" in section
    # The repro contains ``` itself, so the fence must be longer and the script intact.
    assert "````python\nimport numpy as np\n" in section and 'print("```not a fence end```")\n````' in section
    assert section.index("````python") < section.index("</details>")


def test_error_verdict_is_a_failure_without_metrics(tmp_path):
    crashed = dataclasses.replace(
        result("xla", "forward", "error", ratio=None, reason="SIGSEGV in subject call"), repro="print(1)\n"
    )
    text = _render(tmp_path, [*standard_results(), crashed])
    assert "(1 failing check in 1 case, 1 of them errors)" in text.splitlines()[2]
    assert (
        "| xla | forward errors in float32 | 1 | `float32-L128-full-nomask-s0` | SIGSEGV in subject call |"
        in text
    )
    assert "**Error** (the check or the subject crashed" in text
    assert "**Reason:** SIGSEGV in subject call" in text
    assert "Error vs tolerance" not in text


def test_many_causes_keep_their_rows_and_the_rest_is_in_details(tmp_path):
    """Every subject's forward fails in two ways (numbers far off, and NaN): one root cause each per
    subject, however many cases; causes past the first ones in full keep their row, details.md has all."""
    fails = [
        with_verdict(r, "fail", 5.0, reason=f"out: OUT OF TOLERANCE; max-abs {r.case.q_len * 1e-3:g}")
        for r in standard_results()
        if r.check == "forward" and r.metrics and r.case.subject == "flash"
    ]
    fails += [
        with_verdict(r, "error", reason=f"xla crashed on {r.case.q_len} keys at [0, {r.case.q_len}]")
        for r in standard_results()
        if r.check == "forward" and r.metrics and r.case.subject == "xla"
    ]
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(extra=fails))
    text = write_report(folder, plots=False, max_details=1).read_text(encoding="utf-8")
    assert (
        f"## ❌ Not explained by the ledger: 2 root causes "
        f"({len(fails)} failing checks in {len(fails)} cases)" in text
    )
    assert text.count("<details><summary>1. ") == 1 and "<details><summary>2. " not in text
    assert "| [2](details.md#cause-2) | xla | forward errors in float32 and bfloat16 | 14 |" in text
    details = (folder / "details.md").read_text(encoding="utf-8")
    assert "[details.md](details.md)" in text and "[report.md](report.md)" in details
    assert all(f'<a id="cause-{n}"></a>' in details for n in (1, 2))


def test_killed_run_is_marked_incomplete_at_the_top(tmp_path):
    text = _render(tmp_path, standard_results(), complete=False, summary=False)
    lines = text.splitlines()
    assert lines[2] == "> [!WARNING]"
    assert "**Incomplete run.**" in lines[3] and "Rerun with `--resume`" in lines[3]
    verdict = next(line for line in lines if "PASS" in line)
    assert verdict.startswith("⚠️ **INCOMPLETE** · **✅ PASS**")
    assert "environment unknown (no summary.json" in text


def test_torn_last_line_is_dropped_and_reported(tmp_path):
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(), complete=False)
    with (folder / "results.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"kind": "case", "schema": 1, "case": {"case_id": "half')  # kill -9 mid-write
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "Its last line was cut mid-write and was dropped." in text
    assert "**✅ PASS** — all 52 checks" in text


def test_nothing_checked_is_not_a_pass(tmp_path):
    only_unavailable = [r for r in standard_results() if r.verdict == "unavailable"]
    text = _render(tmp_path, only_unavailable)
    assert text.splitlines()[2] == (
        "**⛔ NOT RUN: nothing was checked** — **gpu_triton**: unavailable: needs a CUDA GPU; none here."
    )
    assert "PASS" not in text
    only_unsupported = [r for r in standard_results() if r.verdict == "unsupported"]
    text = _render(tmp_path / "b", only_unsupported)
    assert text.splitlines()[2] == (
        "**⛔ NOT RUN: nothing was checked** — "
        "**flash**: every check unsupported: local window not supported (×1)."
    )


def test_a_mixed_run_is_judged_on_what_ran_and_lists_the_rest(tmp_path):
    text = _render(tmp_path, standard_results())
    assert text.splitlines()[2].startswith(
        "**✅ PASS** — all 52 checks that ran passed (28 cases, 2 subjects)"
    )
    assert "not checked here: gpu_triton (see below)" in text.splitlines()[2]


def test_plot_is_written_and_linked(tmp_path):
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(extra=[_failing()]))
    text = write_report(folder).read_text(encoding="utf-8")
    png = folder / "ratio-vs-length.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "(ratio-vs-length.png)" in text


def test_cli_render(tmp_path, capsys):
    folder = write_run(tmp_path / "jax-0.9.2", standard_results(), jax="0.9.2")
    assert main(["render", str(folder), "--no-plots"]) == 0
    assert capsys.readouterr().out.strip().endswith(REPORT_FILE)
    assert (folder / REPORT_FILE).read_text(encoding="utf-8").startswith("# Conformance report · jax 0.9.2")


def test_rerender_replaces_the_report(tmp_path):
    folder = write_run(tmp_path / "jax-0.10.2", standard_results())
    first = write_report(folder, plots=False).read_text(encoding="utf-8")
    write_run(folder, standard_results(extra=[_failing()]))
    second = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "PASS" in first and "FAIL" in second
    assert sorted(p.name for p in folder.iterdir()) == ["report.md", "repro", "results.jsonl", "summary.json"]


def test_each_repro_is_written_beside_the_report_and_stale_ones_go(tmp_path):
    """Records of any age (this one's repro predates standalone scripts) get their script as a file;
    a later render of the folder removes scripts that no result holds any more."""
    failing = _failing()
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(extra=[failing]))
    write_report(folder, plots=False)
    script = folder / "repro" / "forward" / f"{failing.case.case_id}.py"
    assert script.read_text(encoding="utf-8") == failing.repro
    write_run(folder, standard_results())
    write_report(folder, plots=False)
    assert not script.exists()


def test_repro_scripts_are_written_without_an_fsync_each_and_the_report_with_one(tmp_path, monkeypatch):
    """A run's repro scripts are rendered again from results.jsonl by every render, so each is
    renamed in whole but not synced (594 fsyncs took 0.6-2 s at the end of --impl all); report.md
    and summary-like files still are."""
    failing = [
        dataclasses.replace(_failing(), case=dataclasses.replace(_failing().case, case_id=f"c{i}"))
        for i in range(5)
    ]
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(extra=failing))
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    write_report(folder, plots=False)
    assert len(list((folder / "repro").glob("*/*.py"))) == 5
    assert not [path for path in synced if "/repro/" in path]
    assert [path for path in synced if "report.md" in path]


@pytest.mark.parametrize("jax_in", ["summary", "folder"])
def test_version_comes_from_environment_else_folder_name(tmp_path, jax_in):
    folder = write_run(tmp_path / "jax-0.6.2", standard_results(), jax="0.6.2", summary=jax_in == "summary")
    assert load_run(folder).jax_version == "0.6.2"


def test_suite_features_are_grouped_and_labelled(tmp_path):
    """The suite's own vocabulary: every check is a feature, masks carry their alignment."""
    results = [
        result("tpu_flash", "forward", features=("forward", "bfloat16", "causal_top_left", "sq_ne_sk")),
        result("tpu_flash", "determinism", features=("determinism", "bfloat16", "causal_top_left")),
        result("tpu_flash", "leak", features=("leak", "float32")),
    ]
    rows = _grid_rows(_render(tmp_path, results))
    labels = list(rows)[1:]
    assert labels == [
        "**all checks**",
        "*checks*",
        "forward",
        "determinism",
        "no leak",
        "*masks and options*",
        "causal (top-left)",
        "Sq ≠ Sk",
        "*dtypes*",
        "float32",
        "bfloat16",
    ]


def test_multiline_reason_and_execution_in_the_subject_lines(tmp_path):
    failing = dataclasses.replace(
        _failing(), reason="out of tolerance\nsee the table\nShrunk to a smaller failing case: x (q 7)"
    )
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(extra=[failing]))
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary["subjects"] = [
        {
            "name": "flash",
            "available": True,
            "execution": "interpret",
            "execution_detail": "Pallas TPU on CPU",
        },
        {"name": "xla", "available": True, "execution": ""},
        {"name": "gpu_triton", "available": False, "execution": ""},
    ]
    summary["hypothesis_seed"] = 1234
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "**Reason:**\n\n```text\nout of tolerance\nsee the table\n```" in text
    # The shrink note (an old record: only in the reason) is said once, apart, with the repro's case.
    assert "**Shrunk to:** `x` (smaller cases failing the same way)." in text
    assert "The forward check of the smaller case `x`, shrunk from `bfloat16-L129-causal-nomask-s0`." in text
    assert (
        "- ❌ **flash** — 1 failing (1 root cause) · 25 passed · ➖ 1 unsupported · Pallas TPU on CPU" in text
    )
    assert "- ✅ **xla** — 26 passed · native" in text
    assert "profile ci · seed 1234\n" in text  # the suite's hypothesis_seed wins over a plain seed


def test_a_reason_is_said_once_per_cell(tmp_path):
    """Forward and backward constraints both violated: the same constraint is one clause."""
    from reports.run_report.render import unique_clauses

    clause = "kv_len: block (default 128; raises) must divide kv_len"
    twice = f"{clause}; {clause}"
    assert unique_clauses(twice + "; q_len: other (a; b)") == (
        "kv_len: block (default 128; raises) must divide kv_len; q_len: other (a; b)"
    )
    assert unique_clauses("a (x; y); c (z; y)") == "a (x; y); c (z; y)"  # brackets stay whole
    repeated = [
        dataclasses.replace(r, reason=twice, case=dataclasses.replace(r.case, case_id=f"c{n}"))
        for n, r in enumerate(standard_results()[:3])
    ]
    repeated = [dataclasses.replace(r, verdict="unsupported", metrics=()) for r in repeated]
    text = _render(tmp_path, [*standard_results(), *repeated])
    fold = text[text.index("<details><summary>➖ Unsupported") :]
    fold = fold[: fold.index("</details>")]
    assert fold.count("kv_len: block (default 128; raises) must divide kv_len") == 1
    assert fold.count("**flash**") == 1  # the subject once per group of rows


@pytest.mark.parametrize("page", ["README.md", "docs/reports.md"])
def test_the_documented_first_screen_is_what_render_writes(tmp_path, page):
    """The sample first screen in the README and docs/reports.md has the renderer's shape: title,
    verdict, environment, one line per subject, then folds (their titles as the renderer writes them)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / page).read_text(encoding="utf-8")
    sample = text[text.index("```\n# Conformance report") + 4 :]
    sample = sample[: sample.index("```")].splitlines()
    issue = {"id": "mask-edge", "link": "https://github.com/example/kernels/issues/3", "summary": "edge"}
    known = [
        dataclasses.replace(with_verdict(r, "fail", 5.0), verdict="known", known_issue=issue)
        for r in standard_results()[:4]
    ]
    rendered = _render(tmp_path, [*standard_results(), *known]).splitlines()
    for documented, written in zip(sample[:6], rendered[:6], strict=True):
        # the sample is a real run's (Python 3.12.1), the fixture's environment another: same shape
        shape = [
            re.sub(r"\d+(\.\d+)*", "N", line.split(" — ")[0].split(" · ")[0])
            for line in (documented, written)
        ]
        assert shape[0] == shape[1]
    assert sample[6].startswith("- ✅ **tpu_flash** — ") and " passed · 🐞 " in sample[6]
    folds = [line[2:] for line in sample if line.startswith("▸ ")]
    titles = [line.split("<summary>")[1].split("</summary>")[0] for line in rendered if "<summary>" in line]
    assert folds[0].split(":")[0] == titles[0].split(":")[0] == "🐞 Known issues"
    render_py = Path(__file__).resolve().parents[3] / "reports" / "run_report" / "render.py"
    source = render_py.read_text(encoding="utf-8")
    assert all(f.split(":")[0] in source for f in folds if f != "...")  # fold titles render.py writes


def test_each_distinct_warning_of_a_subject_shows_once_under_its_line(tmp_path):
    deprecated = "DeprecationWarning: flash is deprecated. Please use <new_flash> instead."
    future = "FutureWarning: the default block size will change"
    results = [
        dataclasses.replace(
            r, availability={**r.availability, "warnings": [deprecated, future][: 1 + (i % 2)]}
        )
        if r.case.subject == "flash"
        else r
        for i, r in enumerate(standard_results())
    ]
    folder = write_run(tmp_path / "jax-0.10.2", results)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary["subjects"] = [  # raised while resolving: an unavailable subject has no record to carry it
        {"name": "flash", "available": True, "warnings": [deprecated]},
        {"name": "gpu_triton", "available": False, "warnings": ["UserWarning: no CUDA here"]},
    ]
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    lines = write_report(folder, plots=False).read_text(encoding="utf-8").splitlines()
    at = lines.index("- ✅ **flash** — 26 passed · ➖ 1 unsupported · native")
    assert lines[at + 1 : at + 4] == [
        "  - ⚠️ DeprecationWarning: flash is deprecated. Please use &lt;new_flash&gt; instead.",
        "  - ⚠️ FutureWarning: the default block size will change",
        "- 🚫 **gpu_triton** — not checked: unavailable: needs a CUDA GPU; none here",
    ]
    assert lines[at + 4 : at + 6] == ["  - ⚠️ UserWarning: no CUDA here", "- ✅ **xla** — 26 passed"]


def test_a_subject_that_only_lowers_here_says_why_the_rest_is_unavailable(tmp_path):
    reason = "needs a TPU here: a probe call under TPU interpret mode failed: AttributeError: x"
    extra = [
        result("flash", check, "unavailable", ratio=None, features=(), reason=reason, case_id=f"c-{check}")
        for check in ("forward", "backward")
    ]
    lines = _render(tmp_path, standard_results(extra=extra)).splitlines()
    at = lines.index("- ✅ **flash** — 26 passed · ➖ 1 unsupported · 🚫 2 unavailable")
    assert lines[at + 1 : at + 3] == [
        f"  - 🚫 unavailable: {reason}",
        "- 🚫 **gpu_triton** — not checked: unavailable: needs a CUDA GPU; none here",
    ]


def test_a_tensor_no_answer_could_fail_is_named_on_the_verdict_line(tmp_path):
    results = standard_results()
    judged = next(r for r in results if r.check == "backward" and r.metrics)
    weak = dataclasses.replace(judged.metrics[0], weak=("zeros", "negated"))
    marked = dataclasses.replace(judged, metrics=(weak, *judged.metrics[1:]))
    text = _render(tmp_path, [marked if r is judged else r for r in results])
    verdict = text.splitlines()[2]
    assert verdict.startswith("**✅ PASS**")
    assert (
        f"⚠️ 1 tensor not judged: no answer could fail there ({judged.case.subject} dq ({judged.case.dtype}))"
        in verdict
    )
    assert "not judged" not in _render(tmp_path / "clean", standard_results()).splitlines()[2]

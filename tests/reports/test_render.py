"""report.md for one run: verdict, grid, environment, failure details, incomplete marker."""

from __future__ import annotations

import dataclasses
import json

import pytest

from reports.__main__ import main
from reports.render import REPORT_FILE, write_report
from reports.run import load_run
from tests.reports.synthetic import result, standard_results, with_verdict, write_run


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
    assert "1 unsupported" in verdict and "gpu_triton" in verdict
    assert lines[4].startswith("Python 3.11.7 · jax 0.10.2 · jaxlib 0.10.2 · numpy 2.4.6 · cpu (cpu)")
    assert "profile ci · seed 0" in lines[4]
    assert "INCOMPLETE" not in text and "## Failures" not in text
    assert len(lines) < 40  # one screen: no failure sections, unsupported reasons collapsed


def _grid_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
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
    assert "🚫 **gpu_triton** is unavailable here: needs a CUDA GPU; none here" in text


def test_failure_section_has_case_worst_element_ratio_and_repro(tmp_path):
    text = _render(tmp_path, standard_results(extra=[_failing()]))
    assert "**❌ FAIL** — 1 of 54 checks failed" in text
    assert "failing: flash" in text
    assert _grid_rows(text)["**all checks**"][0] == "❌ 1/27"
    section = text[text.index("## Failures: 1 finding (1 failing check)") :]
    assert "### 1. ❌ flash · forward fails in bfloat16 · `*-L129-causal-nomask-s0`" in section
    assert "**Case id:** `bfloat16-L129-causal-nomask-s0`." in section
    assert "**Case:** bfloat16, batch 2, 4 heads, q 129 × kv 129, head dim 64, causal (top-left)" in section
    assert "**Worst element:** `out[1, 0, 127, 5]: subject 0.5073, reference 0.5 (error 7.30e-03)`" in section
    assert (
        "is 3.65× the tolerance 2.00e-03" in section
        and "error ratio to the baseline 7.3 (allowed about 2)" in section
    )
    assert "out: max-abs error over tolerance \\| see table" in section  # a pipe cannot break the layout
    path = "repro/forward/bfloat16-L129-causal-nomask-s0.py"
    assert f"<details><summary>Repro script (<code>{path}</code>, beside this report)</summary>" in section
    # The repro contains ``` itself, so the fence must be longer and the script intact.
    assert "````python\nimport numpy as np\n" in section and 'print("```not a fence end```")\n````' in section
    assert section.index("<details>") < section.index("</details>")


def test_error_verdict_is_a_failure_without_metrics(tmp_path):
    crashed = dataclasses.replace(
        result("xla", "forward", "error", ratio=None, reason="SIGSEGV in subject call"), repro="print(1)\n"
    )
    text = _render(tmp_path, [*standard_results(), crashed])
    assert "1 of them errors" in text.splitlines()[2]
    assert "**Error** (the check or the subject crashed" in text
    assert "**Reason:** SIGSEGV in subject call" in text
    assert "Worst element" not in text.split("## Failures")[1].split("Repro")[0]


def test_many_failures_are_listed_after_the_detailed_ones(tmp_path):
    fails = [with_verdict(r, "fail", 5.0) for r in standard_results() if r.check == "forward" and r.metrics]
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(extra=fails))
    text = write_report(folder, plots=False, max_details=3).read_text(encoding="utf-8")
    # float32 and bfloat16 of one case are one finding: 2 subjects x (6 lengths + segment ids).
    findings = len(fails) // 2
    assert findings == 14 and f"## Failures: 14 findings ({len(fails)} failing checks)" in text
    assert text.count("<details><summary>Repro script") == 3
    assert f"### Further findings ({findings - 3})" in text
    assert "| [4](details.md#finding-4) | flash | forward fails in float32 and bfloat16 |" in text
    # The findings only listed in report.md are in full in details.md, beside it.
    details = (folder / "details.md").read_text(encoding="utf-8")
    assert "[details.md](details.md)" in text and "[report.md](report.md)" in details
    assert details.count("<details><summary>Repro script") == findings
    assert all(f'<a id="finding-{n}"></a>' in details for n in range(1, findings + 1))


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


def test_nothing_ran_is_not_a_pass(tmp_path):
    only_unavailable = [r for r in standard_results() if r.verdict == "unavailable"]
    text = _render(tmp_path, only_unavailable)
    assert "**⚠️ NOTHING RAN**" in text and "✅ PASS" not in text


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


def test_multiline_reason_and_execution_line(tmp_path):
    failing = dataclasses.replace(
        _failing(), reason="out of tolerance\nsee the table\nShrunk to a smaller failing case: x (q 7)"
    )
    folder = write_run(tmp_path / "jax-0.10.2", standard_results(extra=[failing]))
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary["subjects"] = [
        {"name": "flash", "available": True, "execution": "pallas TPU interpret mode on CPU"},
        {"name": "xla", "available": True, "execution": ""},
        {"name": "gpu_triton", "available": False, "execution": ""},
    ]
    summary["hypothesis_seed"] = 1234
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    assert "**Reason:**\n\n```text\nout of tolerance\nsee the table\n```" in text
    # The shrink note (an old record: only in the reason) is said once, apart, with the repro's case.
    assert "**Shrunk to:** `x` (smaller cases failing the same way)." in text
    assert "The forward check of the smaller case `x`, shrunk from `bfloat16-L129-causal-nomask-s0`:" in text
    assert "Execution · flash: pallas TPU interpret mode on CPU · xla: native" in text
    assert "profile ci · seed 1234\n" in text  # the suite's hypothesis_seed wins over a plain seed


def test_execution_line_shows_the_detail_of_the_literal():
    from reports.render import execution_line

    subjects = [
        {
            "name": "flash",
            "available": True,
            "execution": "interpret",
            "execution_detail": "Pallas TPU on CPU",
        },
        {"name": "xla", "available": True, "execution": "native", "execution_detail": ""},
    ]
    fake = type("FakeRun", (), {"summary": {"subjects": subjects}})()
    assert execution_line(fake) == "Execution · flash: Pallas TPU on CPU · xla: native"

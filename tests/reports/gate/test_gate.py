"""The upgrade gate: one test per rule, the fixed list, thresholds and exit codes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from reports.__main__ import main
from reports.gate.benchmark_comparison import benchmark_regressions
from reports.gate.comparison import gate
from reports.gate.findings import EXIT_BAD_INPUT, EXIT_PASS, EXIT_REGRESSION
from reports.gate.thresholds import Thresholds
from run_records.benchmarks_file import Benchmark
from tests.support.report_folders import standard_results, with_verdict, write_run

ROOT = Path(__file__).resolve().parents[3]


def _pick(results, subject="xla", check="backward", dtype="bfloat16", length=1000):
    return next(
        r
        for r in results
        if (r.case.subject, r.check, r.case.dtype, r.case.q_len) == (subject, check, dtype, length)
    )


def _pair(tmp_path, base_results, cand_results, **cand_kwargs):
    base = write_run(tmp_path / "jax-0.9.2", base_results, jax="0.9.2")
    cand = write_run(tmp_path / "jax-0.10.2", cand_results, **cand_kwargs)
    return base, cand


def _gate(tmp_path, base_results, cand_results, capsys, *options, **cand_kwargs) -> tuple[int, str]:
    base, cand = _pair(tmp_path, base_results, cand_results, **cand_kwargs)
    code = main(["gate", str(base), str(cand), *options])
    return code, capsys.readouterr().out


def test_identical_runs_pass(tmp_path, capsys):
    code, out = _gate(tmp_path, standard_results(), standard_results(), capsys)
    assert code == EXIT_PASS
    assert out.startswith(
        "## ✅ Upgrade gate: PASS — jax 0.10.2 (jax-0.10.2) has no regression against jax 0.9.2"
    )
    assert "54 checks compared, 0 fixed" in out


def test_newly_failing_check_fails_the_gate(tmp_path, capsys):
    base = standard_results()
    broken = with_verdict(_pick(base), "fail", 8.0, reason="dq out of tolerance")
    code, out = _gate(tmp_path, base, standard_results(extra=[broken]), capsys)
    assert code == EXIT_REGRESSION
    assert "## ❌ Upgrade gate: FAIL — 1 regression" in out
    assert "### ❌ Newly failing: 1 root cause (1 failing check in 1 case)" in out
    assert "| xla | backward · bfloat16-L1000-full-nomask-s0 | pass | fail | dq: ratio 8 (k 3) |" in out


def test_fixed_checks_are_listed_but_do_not_fail(tmp_path, capsys):
    base_results = standard_results(extra=[with_verdict(_pick(standard_results()), "fail", 8.0)])
    code, out = _gate(tmp_path, base_results, standard_results(), capsys)
    assert code == EXIT_PASS
    assert (
        "### ✅ Fixed: 1 root cause (1 check in 1 case)" in out
        and "| xla | backward · bfloat16-L1000-full-nomask-s0 | fail | pass | was dq: ratio 8 (k 3) |" in out
    )


def test_ratio_drift_beyond_threshold_fails(tmp_path, capsys):
    code, out = _gate(tmp_path, standard_results(), standard_results(drift=1.6), capsys)
    assert code == EXIT_REGRESSION
    assert "### ❌ Error-ratio drift (systematic) (32)" in out  # 2 subjects, 2 dtypes, 4 tensors, max/mean
    assert (
        "| flash | bfloat16 · out ratio · 7 cases | median 1.33 · p90 1.42 | median 2.13 · p90 2.27 "
        "| typical case ×1.60 (≥ ×1.60 at 95%) |" in out
    )


def test_drift_within_threshold_passes(tmp_path, capsys):
    code, _ = _gate(tmp_path, standard_results(), standard_results(drift=1.4), capsys)
    assert code == EXIT_PASS
    # A looser threshold accepts the +60% drift; written as a percentage too.
    base, cand = tmp_path / "jax-0.9.2", tmp_path / "jax-0.10.2"
    assert main(["gate", str(base), str(cand), "--ratio-drift", "70%"]) == EXIT_PASS
    capsys.readouterr()


def test_drift_below_the_plain_baseline_still_counts(tmp_path):
    # Ratios under 1 (a kernel more accurate than the plain baseline, as in bfloat16) that
    # double everywhere are a real precision loss; the old floor at 1 hid it.
    base_dir, cand_dir = _pair(tmp_path, standard_results(drift=0.3), standard_results(drift=0.6))
    result = gate(base_dir, cand_dir)
    assert {f.rule for f in result.regressions} == {"ratio drift"}
    assert gate(base_dir, cand_dir, Thresholds(ratio_drift=1.5)).passed


def test_small_groups_are_left_to_the_single_case_rule(tmp_path):
    base_dir, cand_dir = _pair(tmp_path, standard_results(), standard_results(drift=1.6))
    assert gate(base_dir, cand_dir, Thresholds(drift_min_cases=8)).passed  # groups hold 6 or 7 cases


def test_non_finite_ratio_is_drift(tmp_path):
    base = standard_results()
    victim = _pick(base, "flash", "forward", "float32", 128)
    nan_metric = dataclasses.replace(victim.metrics[0], ratio=float("nan"))
    cand = standard_results(extra=[dataclasses.replace(victim, metrics=(nan_metric,))])
    result = gate(*_pair(tmp_path, base, cand))
    assert [f.rule for f in result.regressions] == ["ratio jump"]
    assert result.regressions[0].detail == "new non-finite ratio"


def test_lost_subject_is_an_api_break(tmp_path, capsys):
    cand = [r for r in standard_results() if r.case.subject != "xla"]
    cand += [with_verdict(_pick(standard_results()), "unavailable", reason="module moved in this JAX")]
    code, out = _gate(tmp_path, standard_results(), cand, capsys)
    assert code == EXIT_REGRESSION
    assert "### ❌ Lost subjects (API break) (1)" in out
    assert "| xla | availability | available | unavailable | module moved in this JAX |" in out


def test_subject_absent_from_a_complete_candidate_is_lost(tmp_path):
    cand = [r for r in standard_results() if r.case.subject != "xla"]
    result = gate(*_pair(tmp_path, standard_results(), cand))
    assert [(f.rule, f.subject, f.candidate) for f in result.regressions] == [
        ("lost subject", "xla", "absent")
    ]


def test_lost_feature_column_is_an_api_break(tmp_path, capsys):
    cand = [
        dataclasses.replace(r, verdict="unsupported", metrics=(), reason="segment ids not supported")
        if r.case.subject == "flash" and "segment_ids" in r.features
        else r
        for r in standard_results()
    ]
    code, out = _gate(tmp_path, standard_results(), cand, capsys)
    assert code == EXIT_REGRESSION
    assert "### ❌ Lost capabilities (API break) (1)" in out  # the column, not each of its checks
    assert "| flash | segment_ids | pass | unsupported |" in out


def test_single_check_becoming_unsupported_is_listed(tmp_path):
    base = standard_results()
    victim = _pick(base, "flash", "forward", "float32", 1000)
    cand = standard_results(
        extra=[with_verdict(victim, "unsupported", reason="kv_len must be a multiple of 128")]
    )
    result = gate(*_pair(tmp_path, base, cand))
    assert [(f.rule, f.what, f.detail) for f in result.regressions] == [
        ("lost capability", "forward · float32-L1000-full-nomask-s0", "kv_len must be a multiple of 128")
    ]


def test_incomplete_candidate_fails_unless_allowed(tmp_path, capsys):
    code, out = _gate(tmp_path, standard_results(), standard_results()[:20], capsys, complete=False)
    assert code == EXIT_REGRESSION
    assert "⚠️ **incomplete**" in out and "### ❌ Incomplete input (1)" in out
    assert "jax-0.10.2/results.jsonl has no end record (20 results before the stop)" in out
    base, cand = tmp_path / "jax-0.9.2", tmp_path / "jax-0.10.2"
    assert main(["gate", str(base), str(cand), "--allow-incomplete"]) == EXIT_PASS
    out = capsys.readouterr().out
    assert "The candidate run is incomplete; compared on the checks it recorded." in out
    assert "34 checks only in the base (not run by the candidate)." in out


def _bench(folder: Path, entries: list[dict]) -> None:
    doc = {
        "machine_info": {},
        "commit_info": {},
        "datetime": "2026-01-01",
        "version": "5.1.0",
        "benchmarks": [],
    }
    for name, median, extra in entries:
        doc["benchmarks"].append(
            {
                "name": name.split("::")[-1],
                "fullname": name,
                "group": None,
                "stats": {"min": median, "median": median, "mean": median, "rounds": 5},
                "extra_info": extra,
            }
        )
    (folder / "benchmarks.json").write_text(json.dumps(doc), encoding="utf-8")


def test_speed_and_memory_regressions_from_benchmarks(tmp_path, capsys):
    base, cand = _pair(tmp_path, standard_results(), standard_results())
    native = {"execution": "native", "memory_kind": "device"}
    _bench(
        base,
        [
            ("b.py::fwd[1024]", 0.010, {**native, "peak_memory_bytes": 100 * 2**20, "subject": "xla"}),
            ("b.py::bwd[1024]", 0.030, {**native, "peak_memory_bytes": 300 * 2**20}),
            ("b.py::fwd[4096]", 0.100, {"execution": "interpret"}),
        ],
    )
    _bench(
        cand,
        [
            ("b.py::fwd[1024]", 0.014, {**native, "peak_memory_bytes": 100 * 2**20, "subject": "xla"}),
            ("b.py::bwd[1024]", 0.031, {**native, "peak_memory_bytes": 400 * 2**20}),
            ("b.py::fwd[4096]", 0.300, {"execution": "native"}),
        ],
    )
    code = main(["gate", str(base), str(cand)])
    out = capsys.readouterr().out
    assert code == EXIT_REGRESSION
    assert "### ❌ Slower (1)" in out and "| xla | b.py::fwd[1024] | 10 ms | 14 ms | +40% |" in out
    assert (
        "### ❌ More memory (1)" in out
        and "| — | b.py::bwd[1024] (device) | 300 MiB | 400 MiB | +33% |" in out
    )
    assert "1 benchmark not compared: base and candidate ran them differently" in out
    # Looser thresholds accept both.
    assert (
        main(["gate", str(base), str(cand), "--max-slowdown", "0.5", "--max-memory-growth", "0.5"])
        == EXIT_PASS
    )
    capsys.readouterr()


def test_benchmarks_on_one_side_only_are_noted(tmp_path):
    base, cand = _pair(tmp_path, standard_results(), standard_results())
    _bench(base, [("b.py::fwd", 0.01, {})])
    result = gate(base, cand)
    assert result.passed
    assert "Speed and memory not compared: only the base has benchmarks.json." in result.notes


def test_benchmark_rule_is_pure():
    base = {"x": Benchmark("x", 1.0, 10.0, "host_rss"), "y": Benchmark("y", 1.0)}
    cand = {"x": Benchmark("x", 1.2, 10.5, "host_rss"), "z": Benchmark("z", 1.0)}
    found, notes = benchmark_regressions(base, cand, Thresholds())
    assert found == [] and notes == ["2 benchmarks present on one side only, not compared."]


def test_thresholds_are_validated(capsys):
    with pytest.raises(ValueError, match="ratio_drift"):
        Thresholds(ratio_drift=-1)
    with pytest.raises(ValueError, match="near_tolerance"):
        Thresholds(near_tolerance=float("inf"))
    with pytest.raises(ValueError, match="drift_confidence"):
        Thresholds(drift_confidence=1.0)
    with pytest.raises(ValueError, match="drift_min_cases"):
        Thresholds(drift_min_cases=0)
    with pytest.raises(ValueError, match="well_below"):
        Thresholds(well_below=0.8, near_tolerance=0.5)
    with pytest.raises(SystemExit) as exit_info:
        main(["gate", "a", "b", "--ratio-drift", "lots"])
    assert exit_info.value.code == 2
    assert "'lots' is not a number" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["gate", "a", "b", "--drift-min-cases", "0"])
    assert exit_info.value.code == 2
    assert "'0' must be at least 1" in capsys.readouterr().err
    # Each value valid alone, contradictory together: one line, exit 2, no traceback.
    assert main(["gate", "a", "b", "--well-below", "0.9", "--near-tolerance", "50%"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith("error: threshold well_below (0.9) must not exceed")


def test_gate_writes_its_verdict_to_a_file(tmp_path, capsys):
    base, cand = _pair(tmp_path, standard_results(), standard_results())
    assert main(["gate", str(base), str(cand), "--output", str(tmp_path / "gate.md")]) == EXIT_PASS
    assert (tmp_path / "gate.md").read_text(encoding="utf-8") == capsys.readouterr().out.rstrip("\n") + "\n"


def test_module_entry_point_exit_codes(tmp_path):
    base, cand = _pair(
        tmp_path,
        standard_results(),
        standard_results(extra=[with_verdict(_pick(standard_results()), "fail", 8.0)]),
    )

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "reports", "gate", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert run(str(base), str(base)).returncode == EXIT_PASS
    failed = run(str(base), str(cand))
    assert failed.returncode == EXIT_REGRESSION and "Newly failing" in failed.stdout
    missing = run(str(tmp_path / "nope"), str(cand))
    assert missing.returncode == EXIT_BAD_INPUT and "Traceback" not in missing.stderr


def test_long_reasons_are_cut_to_one_table_line(tmp_path):
    base = standard_results()
    crash = dataclasses.replace(
        with_verdict(
            _pick(base), "error", reason="forward raised RuntimeError: " + "x" * 400 + "\nsecond line"
        ),
        metrics=(),
    )
    result = gate(*_pair(tmp_path, base, standard_results(extra=[crash])))
    (finding,) = result.regressions
    assert finding.detail.startswith("forward raised RuntimeError: xxx") and finding.detail.endswith("…")
    assert len(finding.detail) == 160 and "second line" not in finding.detail


@pytest.mark.parametrize(
    ("detail", "kind"),
    [
        ("Pallas generic interpreter (interpret=True) on CPU", "interpret"),
        ("Pallas TPU interpret mode (force_tpu_interpret_mode) on CPU", "interpret"),
        ("native Mosaic on TPU", "native"),
        ("XLA on the default JAX backend", "native"),
        ("user function, called in this process", "native"),
        ("", "native"),
    ],
)
def test_execution_kind_reads_the_adapters_sentence(detail: str, kind: str) -> None:
    """Benchmark files written before Availability.execution was a literal carry the sentence."""
    from run_records.benchmarks_file import execution_kind

    assert execution_kind(detail) == kind


def test_benchmarks_pair_on_the_execution_literal(tmp_path, capsys):
    """The literal decides, never a word in a sentence: a native entry whose detail mentions an
    interpreter still pairs with native; an old file's sentence is read once, as the literal."""
    base, cand = _pair(tmp_path, standard_results(), standard_results())
    _bench(
        base,
        [
            ("b.py::a", 0.010, {"execution": "native", "execution_detail": "no interpreter involved"}),
            ("b.py::b", 0.010, {"execution": "Pallas generic interpreter (interpret=True) on CPU"}),
            ("b.py::c", 0.010, {"execution": "native Mosaic on TPU"}),
        ],
    )
    _bench(
        cand,
        [
            ("b.py::a", 0.020, {"execution": "native", "execution_detail": "XLA on the default JAX backend"}),
            ("b.py::b", 0.020, {"execution": "interpret", "execution_detail": "Pallas TPU interpret mode"}),
            ("b.py::c", 0.020, {"execution": "interpret"}),
        ],
    )
    code = main(["gate", str(base), str(cand)])
    out = capsys.readouterr().out
    assert code == EXIT_REGRESSION
    assert "### ❌ Slower (2)" in out and "b.py::a" in out and "b.py::b" in out
    assert "| b.py::c |" not in out
    assert "1 benchmark not compared: base and candidate ran them differently" in out


def test_a_precision_gain_between_two_runs_is_named_not_silent(tmp_path, capsys):
    # The mirror of the drift rule: every ratio halved (a release fixing a precision defect) passes
    # the gate and says so, group by group; an unchanged pair says nothing.
    code, out = _gate(tmp_path, standard_results(drift=1.6), standard_results(), capsys)
    assert code == EXIT_PASS
    assert "Precision improved: flash · bfloat16 · out ratio · 7 cases: median 2.13 → 1.33" in out
    _, same = _gate(tmp_path / "same", standard_results(), standard_results(), capsys)
    assert "Precision improved" not in same


def test_the_report_grades_precision_per_subject_dtype_and_tensor(tmp_path):
    from reports.run_report.precision import grades, precision_section

    results = standard_results(drift=2.0)
    table = precision_section(results)
    assert "| flash | bfloat16 | out | 7 |" in table
    graded = {(g.subject, g.dtype, g.tensor): g for g in grades(results)}
    base = {(g.subject, g.dtype, g.tensor): g for g in grades(standard_results())}
    assert graded[("flash", "bfloat16", "out")].median == pytest.approx(
        2 * base[("flash", "bfloat16", "out")].median
    )
    weak = [
        dataclasses.replace(r, metrics=tuple(dataclasses.replace(m, weak=("zeros",)) for m in r.metrics))
        for r in results
    ]
    assert precision_section(weak) is None  # a judgement no answer could fail grades nothing

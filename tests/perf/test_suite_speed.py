"""The perf table from fake measurements, and the overhead-split arithmetic (no suite runs)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks.suite_speed import (
    PerfReport,
    ProcessTimes,
    ReferenceSpeed,
    RunMeasurement,
    Split,
    differing_verdicts,
    parse_bench,
    phase_seconds,
    read_probes,
    reference_calls,
    render,
    split_of,
)
from run_records.results_file import CaseDescription, CaseResult, ResultsWriter


def _times(
    subject: float, reference: float, baseline: float, lifetime: float, tests: int = 10, worker: str = "gw0"
) -> ProcessTimes:
    seconds = {"subject": subject, "reference": reference, "baseline": baseline}
    return ProcessTimes(seconds, tests, lifetime, worker)


def test_the_split_adds_the_workers_and_leaves_out_the_controller():
    controller = _times(0.0, 0.0, 0.0, lifetime=100.0, tests=0, worker="")
    split = split_of([controller, _times(50, 10, 5, 80), _times(40, 20, 5, 90, worker="gw1")])
    assert split == Split(subject=90, reference=30, baseline=10, harness=170 - 130, workers=2)
    assert split.total == pytest.approx(170)
    assert split.floor_s == pytest.approx((90 + 30 + 10) / 2)  # the wall with no harness
    assert split.fraction("harness") == pytest.approx(40 / 170)
    assert sum(split.fraction(k) for k in ("subject", "reference", "baseline", "harness")) == pytest.approx(1)


def test_harness_is_never_negative_and_an_empty_run_has_no_shares():
    assert split_of([_times(10, 1, 1, lifetime=11.9)]).harness == 0.0  # clock skew between the two timers
    empty = split_of([])
    assert empty.total == 0 and empty.fraction("subject") == 0.0


def test_probe_files_are_read_back(tmp_path):
    record = {
        "pid": 1,
        "worker": "gw0",
        "tests": 3,
        "lifetime_s": 9.5,
        "seconds": {"subject": 4.0, "reference": 1.0, "baseline": 0.5},
        "calls": {"subject": 6, "reference": 1, "baseline": 1},
    }
    (tmp_path / "probe-1.json").write_text(json.dumps(record))
    (probe,) = read_probes(tmp_path)
    assert probe == ProcessTimes({"subject": 4.0, "reference": 1.0, "baseline": 0.5}, 3, 9.5, "gw0")
    assert split_of([probe]).harness == pytest.approx(4.0)


def test_the_bench_ratio_comes_from_the_last_line():
    out = 'float64 matmul  20.00 GFLOP/s\n{"matmul_gflops": 20.0, "reference_gflops": 12.5, "ratio": 0.625}\n'
    assert parse_bench(out) == ReferenceSpeed(12.5, 20.0, 0.625)


def _report(cold_wall: float, warm_wall: float, harness: float) -> PerfReport:
    split = Split(subject=100 - harness - 18, reference=10, baseline=5, harness=harness, lowering=3)
    return PerfReport(
        cold=RunMeasurement("cold (empty cache)", cold_wall, 300, 1200, split, cpu_s=390.0),
        warm=RunMeasurement("warm (cache filled)", warm_wall, cases=300, checks=1200, split=split),
        reference=ReferenceSpeed(12.5, 20.0, 0.625),
        command="pytest conformance --impl all",
    )


def test_the_table_shows_walls_rates_shares_and_the_reference_ratio():
    text = render(_report(cold_wall=280.0, warm_wall=100.0, harness=6.0))
    rows = [line for line in text.splitlines() if line.startswith(("| cold (", "| warm ("))]
    assert len(rows) == 2
    cold = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert cold == [
        "cold (empty cache)",
        "280 s (4.7 min)",
        "390 s",
        "300",
        "1200",
        "1.07",
        "76.0%",
        "10.0%",
        "5.0%",
        "3.0%",
        "6.0%",
    ]
    assert "0.625 x float64 matmul" in text and "12.50 GFLOP/s" in text
    assert "| warm >= 2.5x faster than cold | 2.80x | met |" in text
    assert "NOT met" not in text
    assert "`pytest conformance --impl all`" in text


def test_the_table_says_which_goals_are_not_met():
    text = render(_report(cold_wall=900.0, warm_wall=600.0, harness=25.0))
    assert "| ci run <= 5 min (cold) | 900 s (15.0 min) | NOT met |" in text
    assert "Floor (" not in text  # a split without workers has no floor to show
    assert "| harness <= 10% (cold (empty cache)) | 25.0% | NOT met |" in text
    assert "| warm >= 2.5x faster than cold | 1.50x | NOT met |" in text


def test_the_floor_is_shown_per_run_and_a_goal_below_it_says_so():
    report = _report(cold_wall=900.0, warm_wall=600.0, harness=25.0)
    cold = dataclasses.replace(report.cold, split=dataclasses.replace(report.cold.split, workers=2))
    heavy = Split(subject=700, reference=10, baseline=20, harness=90, lowering=30, workers=2)
    text = render(dataclasses.replace(report, cold=cold))
    assert "Floor (cold (empty cache)): 38 s" in text and "wall / floor 24.00x" in text
    assert "| ci run <= 5 min (cold) | 900 s (15.0 min) | NOT met |" in text  # the floor is under the goal
    text = render(dataclasses.replace(report, cold=dataclasses.replace(cold, split=heavy)))
    assert "| ci run <= 5 min (cold) | 900 s (15.0 min) | NOT met (its floor is 380 s) |" in text


def test_a_crashed_run_is_flagged_and_a_missing_bench_is_left_out():
    report = _report(100.0, 40.0, 5.0)
    crashed = PerfReport(
        RunMeasurement("cold", 100.0, 0, 0, Split(0, 0, 0, 0), returncode=3), report.warm, None
    )
    text = render(crashed)
    assert "| cold (exit 3) |" in text and "GFLOP/s" not in text


def test_reference_passes_are_counted_over_processes_and_shown_per_run():
    target = "conformance.judge.artifacts.attention_forward"
    procs = [
        ProcessTimes({}, 0, 1.0, "", {}),
        ProcessTimes({}, 5, 9.0, "gw0", {target: 7, "other": 3}),
        ProcessTimes({}, 5, 9.0, "gw1", {target: 5, target + "@shrink": 4}),
    ]
    assert reference_calls(procs) == 12 and reference_calls(procs, shrinking=True) == 4
    report = _report(100.0, 40.0, 5.0)
    cold = dataclasses.replace(report.cold, reference_calls=12, reference_cases=12, shrink_reference_calls=4)
    text = render(dataclasses.replace(report, cold=cold))
    assert (
        "Float64 reference (cold (empty cache)): 12 forward passes for 12 cases that need one, "
        "and 4 for smaller cases tried while shrinking failures."
    ) in text
    assert "Float64 reference (warm" not in text  # no count, no line


def test_verdicts_that_differ_between_cold_and_warm_are_listed(tmp_path):
    cold, warm = run_folder(tmp_path / "cold"), run_folder(tmp_path / "warm")
    write_records(cold, [("c1", "forward", "pass"), ("c1", "lse", "pass"), ("c2", "forward", "fail")])
    write_records(warm, [("c1", "forward", "pass"), ("c1", "lse", "fail")])
    assert differing_verdicts(cold, warm) == ("c1 lse: pass -> fail", "c2 forward: fail -> missing")
    assert differing_verdicts(cold, cold) == ()
    report = _report(100.0, 40.0, 5.0)
    assert "Verdicts: the same in both runs." in render(dataclasses.replace(report, differing=()))
    text = render(dataclasses.replace(report, differing=differing_verdicts(cold, warm)))
    assert "Verdicts: 2 differ between the runs: c1 lse: pass -> fail; c2 forward: fail -> missing" in text
    assert "Verdicts" not in render(report)


def run_folder(path):
    path.mkdir()
    return path


def write_records(folder, rows):
    writer = ResultsWriter(folder, {"impl": "toy"})
    for case_id, check, verdict in rows:
        sizes = {"batch": 1, "q_heads": 1, "kv_heads": 1, "q_len": 1, "kv_len": 1}
        case = CaseDescription(case_id, "toy", "float32", fields={**sizes, "head_dim": 8, "v_head_dim": 8})
        writer.append(CaseResult(case=case, check=check, verdict=verdict))
    writer.finish()


def test_the_phase_table_names_the_phase_that_grew():
    processes = [
        ProcessTimes({"subject": 30.0}, tests=0, lifetime_s=12.0, phases={"plan": 4.0, "report": 2.0}),
        ProcessTimes({"subject": 30.0, "reference": 5.0}, tests=9, lifetime_s=60.0, phases={"lowering": 8.0}),
    ]
    phases = phase_seconds(processes)
    assert phases == {
        "plan": 4.0,
        "subject": 60.0,
        "reference": 5.0,
        "baseline": 0.0,
        "lowering": 8.0,
        "records": 0.0,
        "report": 2.0,
        "other": 0.0,
    }
    report = _report(cold_wall=420.0, warm_wall=150.0, harness=6.0)
    cold = dataclasses.replace(report.cold, phases={**phases, "lowering": 4.0})
    warm = dataclasses.replace(report.warm, phases=phases)
    text = render(dataclasses.replace(report, cold=cold, warm=warm))
    assert "| phase | cold | warm | warm / cold |" in text
    assert "| lowering | 4.0 s | 8.0 s | 2.00 |" in text and "| plan | 4.0 s | 4.0 s | 1.00 |" in text

"""The floor sweep: which passes a floor, not the careful baseline's error, decided."""

from __future__ import annotations

import dataclasses

from reports.__main__ import main
from reports.floor_audit import floor_rows
from tests.support.report_folders import metric, result, write_run


def _with(record, **changes):
    """``record`` with each of its metrics changed (floor, baseline, weak, worst_reference)."""
    return dataclasses.replace(
        record, metrics=tuple(dataclasses.replace(m, **changes) for m in record.metrics)
    )


def test_a_floor_far_above_k_times_the_baseline_is_listed_and_one_near_it_is_not():
    near = _with(result("flash", "forward", case_id="near"), floor=1e-3)  # k x baseline = 2e-3
    far = _with(result("flash", "forward", dtype="bfloat16", case_id="far"), floor=1.0)
    rows = floor_rows([near, far], over=10)
    assert [(r.case_id, r.kind) for r in rows] == [("far", "over")]
    assert rows[0].ratio == 1.0 / (2.0 * 1e-3)


def test_an_exact_baseline_and_a_cancelling_gradient_get_their_own_class():
    exact = _with(result("flash", "forward", case_id="exact"), baseline_max_abs=0.0)
    cancelling = _with(result("flash", "backward", case_id="cancel"), floor=1.0, worst_reference=1e-9)
    kinds = {(r.case_id, r.tensor): r.kind for r in floor_rows([exact, cancelling])}
    assert kinds[("exact", "out")] == "baseline exact"
    assert {kinds[("cancel", t)] for t in ("dq", "dk", "dv")} == {"cancellation"}


def test_weak_judgements_and_failures_are_not_listed():
    weak = _with(result("flash", "forward", case_id="weak"), floor=1.0, weak=("zeros",))
    failing = _with(result("flash", "forward", verdict="fail", ratio=9.0, case_id="failing"), floor=1.0)
    assert floor_rows([weak, failing]) == []


def test_the_command_prints_the_table(tmp_path, capsys):
    far = _with(result("flash", "forward", case_id="far"), floor=1.0)
    write_run(tmp_path, [far, result("flash", "forward", case_id="fine")])
    assert main(["floor-audit", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("1 (subject, dtype, tensor) groups of 2 passing judgements") and "`far`" in text
    assert "`fine`" not in text
    assert metric().floor == 1e-6  # the helper's floor: far below k x baseline, so "fine" is not listed


def test_a_missing_results_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["floor-audit", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no results file" in err

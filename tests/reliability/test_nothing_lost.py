"""Nothing lost: a run killed with SIGKILL at any moment still renders and gates (marked
incomplete), --resume finishes it without redoing what is recorded, and report files
are replaced atomically."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from reports.run_report import render
from run_records import results_file
from run_records.results_file import RESULTS_FILE, read_results
from tests.reliability.suite import FAULTY, run_module
from tests.support.suite import ROOT, run_suite, suite_command

SELECTION = ["-k", "test_forward or test_shape_dtype"]  # ~90 quick checks of the healthy subject
IMPL = f"{FAULTY}:healthy"


def case_lines(folder: Path) -> list[dict]:
    lines = (folder / RESULTS_FILE).read_text().splitlines()
    return [json.loads(line) for line in lines if '"kind": "case"' in line]


def kill_after(folder: Path, records_wanted: int, *extra: str) -> None:
    """Start a run in its own process group; SIGKILL the group (controller and workers) mid-run."""
    process = subprocess.Popen(
        suite_command(folder, IMPL, *SELECTION, *extra),
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if (folder / RESULTS_FILE).exists() and len(case_lines(folder)) >= records_wanted:
                break
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("killed")
    kill_after(folder, records_wanted=5)
    return folder


def test_a_killed_run_renders_marked_incomplete(killed):
    recorded = read_results(killed)
    assert not recorded.complete and len(recorded.results) >= 5
    assert recorded.header["environment"]["libraries"]["numpy"]  # the header names the environment
    done = run_module("reports", "render", str(killed), "--no-plots")
    assert done.returncode == 0, done.stderr
    report = (killed / "report.md").read_text()
    assert "INCOMPLETE" in report and "--resume" in report
    assert "numpy" in report  # environment line, from the header: no summary.json after a kill


def test_a_killed_run_gates_as_incomplete(killed):
    gated = run_module("reports", "gate", str(killed), str(killed))
    assert gated.returncode == 1 and "Incomplete" in gated.stdout, gated.stdout + gated.stderr
    allowed = run_module("reports", "gate", str(killed), str(killed), "--allow-incomplete")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_a_record_cut_mid_write_is_dropped_and_the_rest_stands(killed, tmp_path):
    torn = tmp_path / "torn"
    torn.mkdir()
    text = (killed / RESULTS_FILE).read_text()
    (torn / RESULTS_FILE).write_text(text + text.splitlines()[-1][:57])  # SIGKILL inside a write
    done = run_module("reports", "render", str(torn), "--no-plots")
    assert done.returncode == 0, done.stderr
    assert "cut mid-write" in (torn / "report.md").read_text()
    assert len(read_results(torn).results) == len(read_results(killed).results)


def test_resume_finishes_the_run_without_redoing_recorded_checks(killed):
    before = {(r["case"]["case_id"], r["check"]) for r in case_lines(killed)}
    done = run_suite(killed, IMPL, *SELECTION, "--resume")
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"{len(before)} checks already recorded were deselected" in done.stdout
    after = read_results(killed)
    assert after.complete
    keys = [(r["case"]["case_id"], r["check"]) for r in case_lines(killed)]
    assert len(keys) == len(set(keys))  # no check recorded twice: nothing recorded was rerun
    assert before < set(keys)
    assert {r.check for r in after.results} == {"forward", "shape_dtype"}


def test_with_two_workers_a_killed_run_resumes_to_the_same_checks(tmp_path):
    """Two workers append to one results.jsonl: killed mid-run, every line is still whole, and
    --resume (with two workers again) finishes it with each check once."""
    kill_after(tmp_path, 10, "-n", "2")
    before = {(r["case"]["case_id"], r["check"]) for r in case_lines(tmp_path)}
    done = run_suite(tmp_path, IMPL, *SELECTION, "-n", "2", "--resume")
    assert done.returncode == 0, done.stdout[-3000:]
    keys = [(r["case"]["case_id"], r["check"]) for r in case_lines(tmp_path)]
    assert len(keys) == len(set(keys)) and before < set(keys)
    whole = run_suite(tmp_path / "whole", IMPL, *SELECTION, "-n", "1")
    assert whole.returncode == 0, whole.stdout[-3000:]
    assert set(keys) == {(r["case"]["case_id"], r["check"]) for r in case_lines(tmp_path / "whole")}
    assert read_results(tmp_path).complete


def test_report_files_are_replaced_atomically(tmp_path, monkeypatch):
    """A write that fails half-way leaves the old file whole and no temporary file behind."""
    target = tmp_path / "report.md"
    target.write_text("old report\n")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(results_file.os, "replace", failing_replace)
    with pytest.raises(OSError):
        results_file.write_text_atomic(target, "new report\n" * 1000)
    assert target.read_text() == "old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_every_report_writer_goes_through_the_atomic_helpers():
    """render, matrix, plots, gate output and summary.json: no direct writes into the report folder."""
    paths = [*(ROOT / "reports").rglob("*.py"), ROOT / "conformance/harness/recording.py"]
    sources = {p: p.read_text() for p in paths}
    direct = [
        f"{p.name}: {needle}"
        for p, text in sources.items()
        for needle in (".write_text(", ".write_bytes(", "json.dump(", "savefig(fname", 'open("w')
        if needle in text and p.name != "results_file.py"
    ]
    assert not direct, direct
    assert "write_text_atomic" in sources[ROOT / "reports/run_report/render.py"]
    assert "write_text_atomic" in sources[ROOT / "reports/matrix_report/version_matrix.py"]
    assert "write_bytes_atomic" in sources[ROOT / "reports/run_report/plots.py"]
    assert "write_json_atomic" in sources[ROOT / "conformance/harness/recording.py"]
    assert render.write_report.__module__ == "reports.run_report.render"

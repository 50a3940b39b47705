"""The live progress line: its counts and ETA, when it is printed without a terminal, and
what a real run (not a TTY) prints."""

from __future__ import annotations

import re
import time

from conformance.harness.progress import Display, Progress, item_cost
from run_records.results_file import read_results
from tests.support.suite import SMALL, run_suite, toy


def test_the_line_counts_checks_and_verdicts_and_names_the_current_case():
    progress = Progress()
    progress.plan([1.0] * 5)
    for verdict in ("pass", "pass", "fail", "known"):
        progress.finish(verdict, 1.0, 1.0)
    progress.start("xla-float32-B1 forward")
    line = progress.line(elapsed_s=65)
    assert line.startswith("conformance progress: 4/5 checks")
    assert "2 pass, 1 fail, 0 error, 1 known" in line
    assert "xla-float32-B1 forward" in line and "1:05 elapsed" in line


def test_no_eta_before_anything_is_measured():
    progress = Progress()
    progress.plan([item_cost(1e9)] * 3)
    progress.start("first")
    assert progress.eta_s() is None
    assert "ETA" not in progress.line(elapsed_s=2)
    assert "0/3 checks" in progress.line(elapsed_s=2)


def test_the_eta_weighs_what_is_left_by_cost():
    progress = Progress()
    progress.plan([1.0, 1.0, 8.0])  # the big case is left: 8 cost units at 2 s per unit
    progress.finish("pass", 2.0, 1.0)
    progress.finish("pass", 2.0, 1.0)
    assert progress.eta_s() == 16.0
    assert "ETA 0:16" in progress.line(elapsed_s=4)
    progress.finish("pass", 16.0, 8.0)
    assert progress.eta_s() == 0.0 and "ETA" not in progress.line(elapsed_s=20)


def test_the_eta_falls_back_to_counts_without_costs():
    progress = Progress()
    progress.plan([0.0] * 4)
    progress.finish("error", 3.0, 0.0)
    assert progress.eta_s() == 9.0


def test_an_unknown_plan_shows_a_question_mark_and_no_eta():
    progress = Progress()
    progress.finish("pass", 1.0, 1.0)
    line = progress.line(elapsed_s=1)
    assert "1/? checks" in line and "ETA" not in line


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_plain_line_every_interval_and_one_at_the_end():
    clock, lines = FakeClock(), []
    progress = Progress()
    progress.plan([1.0] * 10)
    display = Display(progress, lines.append, interval_s=30, clock=clock)
    for at in (5, 20, 31, 40, 60, 62):  # seconds after the start
        clock.now = 100.0 + at
        progress.finish("pass", 1.0, 1.0)
        display.update()
    assert [line.split(" | ")[0] for line in lines] == [
        "conformance progress: 3/10 checks",  # at 31 s
        "conformance progress: 6/10 checks",  # at 62 s: 31 s after the last line
    ]
    clock.now = 170.0
    display.close()
    display.close()  # once only
    assert len(lines) == 3 and lines[-1].startswith("conformance progress: 6/10 checks")
    assert "1:10 elapsed" in lines[-1]


def test_on_a_terminal_every_event_rewrites_the_line_and_the_last_one_is_final():
    clock, drawn, lines = FakeClock(), [], []
    progress = Progress()
    progress.plan([1.0, 1.0])
    display = Display(
        progress, lines.append, lambda line, final=False: drawn.append((line, final)), clock=clock
    )
    progress.start("a")
    display.update()
    progress.finish("pass", 1.0, 1.0)
    display.update()
    display.close()
    assert [final for _, final in drawn] == [False, False, True] and lines == []
    assert drawn[0][0].startswith("conformance progress: 0/2") and drawn[-1][0].startswith(
        "conformance progress: 1/2"
    )


def test_a_run_without_a_terminal_prints_the_final_progress_line(tmp_path):
    done = run_suite(tmp_path, toy("exact"), "-k", SMALL)
    assert done.returncode == 0, done.stdout[-3000:]
    recorded = len(read_results(tmp_path).results)
    finals = re.findall(r"conformance progress: (\d+)/(\d+) checks \| (\d+) pass", done.stdout)
    assert finals, done.stdout[-3000:]
    assert finals[-1][:2] == (str(recorded), str(recorded))
    passed = sum(r.verdict == "pass" for r in read_results(tmp_path).results)
    assert finals[-1][2] == str(passed)


def test_no_progress_turns_it_off(tmp_path):
    done = run_suite(tmp_path, toy("exact"), "--no-progress", "-k", "test_forward and " + SMALL)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "conformance progress" not in done.stdout


def test_without_a_terminal_the_line_comes_on_time_while_one_long_item_runs():
    lines = []
    progress = Progress()
    progress.plan([1.0, 1.0])
    progress.start("a long case")
    display = Display(progress, lines.append, interval_s=0.1)
    thread = display.start_heartbeat()
    time.sleep(0.65)  # no event at all: the item is still running
    assert len(lines) >= 3, lines
    assert all("0/2 checks" in line and "a long case" in line for line in lines)
    display.close()
    thread.join(timeout=5)
    count = len(lines)
    time.sleep(0.3)
    assert not thread.is_alive() and len(lines) == count  # the last line was the final one


def test_on_a_terminal_there_is_no_heartbeat_thread():
    display = Display(Progress(), [].append, lambda line, final=False: None, interval_s=0.1)
    assert display.start_heartbeat() is None


def test_the_interval_is_an_option_and_a_bad_one_is_one_line(tmp_path):
    done = run_suite(tmp_path, toy("exact"), "--progress-interval", "0.2", "-k", "test_forward and " + SMALL)
    assert done.returncode == 0, done.stdout[-3000:]
    assert len(re.findall(r"conformance progress: \d+/(?:\d+|\?) checks", done.stdout)) >= 2, done.stdout[
        -3000:
    ]
    bad = run_suite(tmp_path / "bad", toy("exact"), "--progress-interval", "soon")
    assert bad.returncode == 4 and "--progress-interval 'soon': give seconds" in bad.stderr, bad.stderr

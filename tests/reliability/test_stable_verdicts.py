"""Stable verdicts: two ci runs on the same versions give the same case ids and the same verdicts."""

from __future__ import annotations

import re

from run_records.results_file import read_results
from tests.reliability.suite import FAULTY
from tests.support.suite import run_suite

IMPL = f"{FAULTY}:healthy,{FAULTY}:wrong_shape"  # passes and failures both
CHECKS = "test_forward or test_finite"  # the curated matrix and the hypothesis-drawn cases


def collected_ids(tmp_path, name: str) -> list[str]:
    done = run_suite(tmp_path / name, f"{IMPL},xla", "--collect-only", "-n", "0")
    assert done.returncode == 0, done.stdout[-2000:]
    return [line for line in done.stdout.splitlines() if re.match(r"conformance/test_\w+\.py::", line)]


def test_two_ci_runs_plan_the_same_cases(tmp_path):
    first, second = collected_ids(tmp_path, "a"), collected_ids(tmp_path, "b")
    assert first == second and len(first) > 300


def test_two_ci_runs_give_the_same_verdicts(tmp_path):
    runs = []
    for name in ("one", "two"):
        done = run_suite(tmp_path / name, IMPL, "-k", CHECKS)
        assert done.returncode == 1, done.stdout[-2000:]
        runs.append({r.key: r.verdict for r in read_results(tmp_path / name).results})
    assert runs[0] == runs[1]
    assert {"pass", "fail"} <= set(runs[0].values())
    assert len(runs[0]) > 80  # 2 subjects x (curated + drawn cases) x 2 checks

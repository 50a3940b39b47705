"""End to end: a real precision regression inside tolerance fails the gate.

The suite runs the same subject twice (``tests/reports/gate/precision_mutant.py``): once with a
float32 accumulator, once with one reduction (the online softmax's running sum and output)
in bfloat16. Every forward check passes in both; the gate must still fail the second run.
About 30 s on a 2-core CPU (62 bfloat16 forward items, twice); it runs in the default test run.
"""

from __future__ import annotations

import os
from pathlib import Path

from reports.gate.comparison import gate
from run_records.results_file import read_results
from tests.reports.gate.precision_mutant import ACCUMULATOR
from tests.support.suite import run_suite

SUBJECT = "tests.reports.gate.precision_mutant:blocked_attention"


def run_with(report_dir: Path, accumulator: str) -> Path:
    env = {**os.environ, ACCUMULATOR: accumulator}
    args = ("--profile", "ci", "-n", "0", "-k", "test_forward")
    done = run_suite(report_dir, SUBJECT, *args, env=env, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return report_dir


def test_one_reduction_in_bfloat16_fails_the_gate(tmp_path):
    base = run_with(tmp_path / "jax-base", "float32")
    cand = run_with(tmp_path / "jax-bf16", "bfloat16")
    assert {r.verdict for r in read_results(cand).results} <= {"pass", "unsupported"}  # inside tolerance
    result = gate(base, cand)
    assert [(f.rule, f.what.split(" · ")[:2]) for f in result.regressions] == [
        ("ratio drift", ["bfloat16", "out mean ratio"]),
        ("ratio drift", ["bfloat16", "out ratio"]),
    ]
    assert gate(base, base).passed

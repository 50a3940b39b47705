"""End to end: a real precision regression inside tolerance fails the gate.

The suite runs the same subject twice (``tests/reports/gate/precision_mutant.py``): once with a
float32 accumulator, once with one reduction (the online softmax's running sum and output)
in bfloat16. Every forward check passes in both; the gate must still fail the second run.
About a minute on a laptop CPU, so ``slow``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from reports.gate.comparison import gate
from reports.records.results_file import read_results
from tests.reports.gate.precision_mutant import ACCUMULATOR

ROOT = Path(__file__).resolve().parents[3]
SUBJECT = "tests.reports.gate.precision_mutant:blocked_attention"


def run_suite(report_dir: Path, accumulator: str) -> Path:
    command = [sys.executable, "-m", "conformance", "--impl", SUBJECT, "--profile", "ci"]
    command += ["--report-dir", str(report_dir), "--no-shrink", "-q", "-n", "0", "-k", "test_forward"]
    env = {**os.environ, ACCUMULATOR: accumulator}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return report_dir


def test_one_reduction_in_bfloat16_fails_the_gate(tmp_path):
    base = run_suite(tmp_path / "jax-base", "float32")
    cand = run_suite(tmp_path / "jax-bf16", "bfloat16")
    assert {r.verdict for r in read_results(cand).results} <= {"pass", "unsupported"}  # inside tolerance
    result = gate(base, cand)
    assert [(f.rule, f.what.split(" · ")[:2]) for f in result.regressions] == [
        ("ratio drift", ["bfloat16", "out mean ratio"]),
        ("ratio drift", ["bfloat16", "out ratio"]),
    ]
    assert gate(base, base).passed

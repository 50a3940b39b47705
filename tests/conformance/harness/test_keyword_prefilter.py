"""``-k`` applied at planning time selects exactly what pytest's own ``-k`` selects.

Each expression is collected twice, with the early filter and with it switched off
(``keyword_prefilter.OFF_SWITCH``); the two id lists must be equal, and the early run must have
made fewer items (what it is for). The expressions reach every kind of name pytest matches on:
the case id, the check's function name, the folder (a name no case id holds), upper case,
``not`` and parentheses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.harness.keyword_prefilter import OFF_SWITCH
from tests.support.suite import ROOT, child_environment, toy


def collected(tmp_path: Path, expression: str, early: bool) -> tuple[list[str], int]:
    """The ids collected under ``-k expression``, and how many items pytest made in all."""
    command = [sys.executable, "-m", "conformance", "--impl", toy("exact"), "--report-dir", str(tmp_path)]
    command += ["--collect-only", "-q", "-n", "0", "--no-progress", "-k", expression]
    env = child_environment() | {OFF_SWITCH: "1" if early else "0"}
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ids = [line for line in done.stdout.splitlines() if "::test_" in line]
    summary = next(line for line in done.stdout.splitlines() if " collected" in line).split()[0]
    return ids, int(summary.split("/")[-1])  # "12/80 tests collected (68 deselected)" or "12 tests ..."


@pytest.mark.parametrize(
    "expression", ["TEST_LSE and not (Sq128 or causal)", "conformance and (fully or finite) and not Sk256"]
)
def test_the_early_filter_keeps_what_pytests_k_keeps_and_makes_fewer_items(tmp_path: Path, expression: str):
    early, made_early = collected(tmp_path / "early", expression, early=True)
    late, made_late = collected(tmp_path / "late", expression, early=False)
    assert early == late
    assert early  # an empty selection would prove nothing
    assert made_early < made_late

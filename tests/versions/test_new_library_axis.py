"""A new library axis is one row of versions/table.py: with a fake companion library added to the
table (before anything else imports it), its ledger range key, report folder token, shard identity,
gate line, environment key and bisection walk all appear, with no other edit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import dataclasses, json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from versions import table

fake = table.Library(
    name="flashlib", distribution="flashlib",
    releases=(table.Release("1.0", (("jax", "0.10.2"),)), table.Release("1.1", (("jax", "0.10.2"),))),
    matrix=("1.0", "1.1"), pythons=(("1.0", "3.11"),), group="flashlib",
)
table.LIBRARIES = (*table.LIBRARIES, fake)
table.COMPANIONS = (*table.COMPANIONS, fake)

from conformance.judge import known_issues
from reports.bisection import installs
from reports.gate.library_change import LibraryChange, library_change
from reports.ledger import range_edit, release_sweep
from run_records import environment, run_folder, shard_merge

folder = Path({tmp!r}) / "jax-0.12.0.1-tokamax-0.0.17-flashlib-1.1"
base = run_folder.Run(folder=Path({tmp!r}) / "jax-0.12.0.1-flashlib-1.0", results_file=None, summary=None)
candidate = run_folder.Run(folder=folder, results_file=None, summary=None)
object.__setattr__(base, "results_file", type("R", (), {{"header": {{}}}})())
object.__setattr__(candidate, "results_file", type("R", (), {{"header": {{}}}})())
issue = known_issues.KnownIssue(
    id="x", subject="xla", checks=("forward",), link="l", summary="s", ranges=(("flashlib", "<1.1"),)
)
print(json.dumps({{
    "ledger_keys": list(known_issues.RANGE_KEYS),
    "range_edit_keys": list(range_edit.RANGE_KEYS),
    "sweeps": sorted(release_sweep.SWEEPS),
    "folder_versions": candidate.library_versions,
    "label": candidate.versions,
    "gate_line": library_change(base, candidate).line(),
    "in_range_old": issue.in_range({{"jax": "0.12.0.1", "flashlib": "1.0"}}),
    "in_range_new": issue.in_range({{"jax": "0.12.0.1", "flashlib": "1.1"}}),
    "environment": "flashlib" in environment.LIBRARIES,
    "shard_identity": [key for key, _ in shard_merge.RUN_IDENTITY],
    "bisection": list(installs.LIBRARIES),
}}))
"""


def test_a_fake_library_row_appears_everywhere_a_run_is_keyed(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(root=str(ROOT), tmp=str(tmp_path))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ledger_keys"] == seen["range_edit_keys"] == ["jax", "tokamax", "flashlib"]
    assert "flashlib" in seen["sweeps"] and "flashlib" in seen["bisection"]
    assert seen["folder_versions"] == {"jax": "0.12.0.1", "tokamax": "0.0.17", "flashlib": "1.1"}
    assert seen["label"] == "0.12.0.1 + tokamax 0.0.17 + flashlib 1.1"
    assert "flashlib 1.0 → 1.1" in seen["gate_line"] and "tokamax not installed → 0.0.17" in seen["gate_line"]
    assert "jax 0.12.0.1 (unchanged)" in seen["gate_line"]
    assert seen["in_range_old"] is True and seen["in_range_new"] is False
    assert seen["environment"] and "flashlib" in seen["shard_identity"]

"""Safety: results and reports are plain JSON and Markdown (nothing is ever unpickled), and
what a run writes names library versions and hardware, never environment values or home paths."""

from __future__ import annotations

import json
import os
import re

from run_records.environment import environment_block
from tests.reliability.suite import FAULTY
from tests.support.suite import ROOT, run_suite

# Every way Python code commonly deserializes objects it should not trust.
UNSAFE = re.compile(
    r"\bimport pickle\b|\bpickle\.|cPickle|allow_pickle\s*=\s*True|\btorch\.load\(|"
    r"\bjoblib\b|\bimport dill\b|\bshelve\b|\bmarshal\.loads?\(|\byaml\.(unsafe_)?load\(|"
    r"\b(np|numpy)\.load\("
)
SKIP_DIRS = {".git", ".nox", ".venv", "venv", ".ci-venv", "__pycache__", "node_modules"}  # envs are not ours


def project_sources():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("jax-")]
        for name in files:
            if name.endswith((".py", ".cfg", ".toml")):
                yield os.path.join(folder, name)


def test_nothing_is_ever_unpickled():
    hits = []
    for path in project_sources():
        if path == __file__:
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if UNSAFE.search(line) and "never unpickled" not in line:
                    hits.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    assert not hits, hits


def test_the_environment_block_holds_versions_and_hardware_only(monkeypatch, tmp_path):
    home = tmp_path / "home" / "alice"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ATTN_SECRET_TOKEN", "s3cr3t-value-42")
    block = json.dumps(environment_block())
    assert "s3cr3t-value-42" not in block and "ATTN_SECRET_TOKEN" not in block
    assert str(home) not in block and "alice" not in block
    assert set(environment_block()) <= {
        "python",
        "platform",
        "processor",
        "libraries",
        "tokamax",
        "backend",
        "device_kind",
        "device_count",
        "git_revision",
    }


def test_a_run_writes_no_secret_and_no_home_path(tmp_path):
    """A real run (a crash included) from a fake home, with a secret in the environment."""
    home = tmp_path / "home" / "alice"
    report_dir = home / "reports" / "run"
    env = {**os.environ, "HOME": str(home), "ATTN_SECRET_TOKEN": "s3cr3t-value-42"}
    done = run_suite(
        report_dir,
        f"{FAULTY}:healthy,{FAULTY}:abort",
        "-k",
        "test_forward and full and (Sq1-Sk1-D32 or Sq113-Sk113-D64)",
        env=env,
        isolated=True,  # the crash is contained by the worker process
    )
    assert done.returncode == 1, done.stdout[-2000:]
    written = sorted(p for p in report_dir.rglob("*") if p.is_file())
    assert {p.name for p in written} >= {"results.jsonl", "summary.json", "report.md"}
    for path in written:
        if path.suffix in (".jsonl", ".json", ".md", ".xml"):
            text = path.read_text()
            assert "s3cr3t-value-42" not in text, path.name
            assert str(home) not in text and "alice" not in text, path.name
    assert "SIGABRT" in (report_dir / "report.md").read_text()

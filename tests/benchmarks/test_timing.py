"""One tiny benchmark run end to end: pytest-benchmark's JSON carries what the gate reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.shapes import shape_list
from benchmarks.timing import choose_rounds
from run_records.benchmarks_file import read_benchmarks
from tests.support.suite import child_environment

ROOT = Path(__file__).resolve().parents[2]


def test_rounds_fill_the_target_within_bounds() -> None:
    settings = shape_list("cpu")
    assert choose_rounds(settings.target_s / 10, settings) == 10
    assert choose_rounds(100.0, settings) == settings.min_rounds
    assert choose_rounds(1e-9, settings) == settings.max_rounds
    assert choose_rounds(0.0, settings) == settings.max_rounds


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """``pytest benchmarks`` on the xla subject and the one-shape smoke list, in a subprocess."""
    folder = tmp_path_factory.mktemp("jax-smoke")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "benchmarks",
        "-q",
        "-p",
        "no:cacheprovider",
        "--bench-subjects",
        "xla,cudnn",
        "--bench-shapes",
        "smoke",
        f"--benchmark-json={folder / 'benchmarks.json'}",
    ]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=child_environment()
    )
    return folder, result


def test_smoke_benchmarks_pass(smoke_run) -> None:
    _, result = smoke_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_gate_reads_speed_memory_and_execution(smoke_run) -> None:
    folder, _ = smoke_run
    benchmarks = read_benchmarks(folder)
    prefix = "benchmarks/test_subjects.py::test_subject[xla-"
    modes = {name.removeprefix(prefix).split("-f32")[0]: b for name, b in benchmarks.items()}
    assert set(modes) == {"forward", "forward_backward", "compile"}
    for bench in modes.values():
        assert bench.median_s > 0
        assert bench.execution == "native"  # XLA runs natively, on CPU too
        assert bench.memory_bytes and bench.memory_bytes > 0
        assert bench.memory_kind in ("host_rss", "host_rss_bound", "device", "device_bound")


def test_extra_info_records_the_case_and_its_compile_time(smoke_run) -> None:
    import json

    folder, _ = smoke_run
    data = json.loads((folder / "benchmarks.json").read_text())
    assert data["machine_info"]["jax"]["jax"]
    for entry in data["benchmarks"]:
        info = entry["extra_info"]
        assert info["shape_list"] == "smoke" and info["subject"] == "xla"
        assert info["first_call_s"] > 0 and info["compile_s"] >= 0
        assert info["mode"] in entry["name"]
    compile_entry = next(e for e in data["benchmarks"] if e["extra_info"]["mode"] == "compile")
    # a cold first call (trace + compile) is slower than a warm one
    assert compile_entry["stats"]["median"] > compile_entry["extra_info"]["steady_s"]


def test_unavailable_subject_is_skipped_with_its_reason(smoke_run) -> None:
    _, result = smoke_run
    assert "cudnn unavailable" in result.stdout or "cudnn" not in result.stdout

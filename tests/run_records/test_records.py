"""Additions to the results format: summary reading, atomic writes, the benchmark reader."""

from __future__ import annotations

import os

import pytest

from reports.run_report.render import write_report
from run_records import results_file
from run_records.benchmarks_file import read_benchmarks
from run_records.results_file import ResultsFileError, read_summary, write_bytes_atomic, write_text_atomic
from tests.support.report_folders import standard_results, write_run


def test_read_summary(tmp_path):
    assert read_summary(tmp_path) is None  # a killed run has none yet
    (tmp_path / "summary.json").write_text('{"profile": "ci"}', encoding="utf-8")
    assert read_summary(tmp_path) == {"profile": "ci"}
    (tmp_path / "summary.json").write_text("", encoding="utf-8")
    with pytest.raises(ResultsFileError, match="summary.json:1: the summary file is empty"):
        read_summary(tmp_path)
    (tmp_path / "summary.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ResultsFileError, match="summary.json:1: the summary is not a JSON object"):
        read_summary(tmp_path)


@pytest.mark.real_fsync
def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "report.md"
    write_text_atomic(path, "first\n")
    write_text_atomic(path, "second\n")
    assert path.read_text(encoding="utf-8") == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["report.md"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "report.md"
    write_text_atomic(path, "old report\n")

    def crash(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results_file.os, "replace", crash)
    with pytest.raises(OSError):
        write_bytes_atomic(path, b"new report that never lands\n")
    assert path.read_text(encoding="utf-8") == "old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_report_is_never_seen_half_written(tmp_path, monkeypatch):
    """write_report goes through the atomic writer: a reader sees the old report or the new one."""
    folder = write_run(tmp_path / "jax-0.10.2", standard_results())
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((os.path.basename(src), os.path.basename(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(results_file.os, "replace", spy)
    write_report(folder)
    assert (f".report.md.tmp-{os.getpid()}", "report.md") in seen
    assert (f".ratio-vs-length.png.tmp-{os.getpid()}", "ratio-vs-length.png") in seen


def test_read_benchmarks(tmp_path):
    assert read_benchmarks(tmp_path) is None
    (tmp_path / "benchmarks.json").write_text(
        """{"benchmarks": [
        {"name": "fwd", "fullname": "t.py::fwd", "stats": {"median": 0.5},
         "extra_info": {"peak_rss_bytes": 1024, "execution": "interpret"}},
        {"name": "bwd", "stats": {"median": 2},
         "extra_info": {"peak_memory_bytes": 10, "memory_kind": "device"}}
        ]}""",
        encoding="utf-8",
    )
    found = read_benchmarks(tmp_path)
    assert found["t.py::fwd"].median_s == 0.5 and found["t.py::fwd"].memory_bytes == 1024
    assert found["t.py::fwd"].memory_kind == "rss" and found["t.py::fwd"].execution == "interpret"
    assert found["bwd"].memory_kind == "device"
    (tmp_path / "benchmarks.json").write_text("", encoding="utf-8")
    with pytest.raises(ResultsFileError, match="benchmarks.json:1: the benchmark file is empty"):
        read_benchmarks(tmp_path)

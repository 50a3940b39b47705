"""python -m reports merge: the shards of one run as one folder; anything else refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reports.run_report.render import write_report
from run_records import shard_merge as merge_module
from run_records.results_file import (
    ResultsWriter,
    lock_holder,
    read_results,
    read_summary,
    write_json_atomic,
)
from run_records.shard_merge import MergeError, merge
from tests.support import report_folders

ROOT = Path(__file__).resolve().parents[2]


def _header(index, count, **changes):
    header = {
        "impl": "all",
        "subjects": ["flash", "xla", "gpu_triton"],
        "profile": "ci",
        "hypothesis_seed": 0,
        "shard": None if index is None else {"index": index, "count": count},
        "environment": {**report_folders.environment(), "git_revision": "abc123"},
    }
    for key, value in changes.items():
        if key in ("jax", "git_revision"):
            env = dict(header["environment"])
            if key == "jax":
                env["libraries"] = {**env["libraries"], "jax": value}
            else:
                env["git_revision"] = value
            header["environment"] = env
        else:
            header[key] = value
    return header


def _split(count):
    """standard_results split by case id into ``count`` parts."""
    parts = [[] for _ in range(count)]
    case_ids = sorted({r.case.case_id for r in report_folders.standard_results()})
    for r in report_folders.standard_results():
        parts[case_ids.index(r.case.case_id) % count].append(r)
    return parts


def _write_shard(folder, index, count, results, *, complete=True, **changes):
    header = _header(index, count, **changes)
    writer = ResultsWriter(folder, header)
    for r in results:
        writer.append(r)
    if complete:
        writer.finish({"counts": {"pass": len(results)}, "duration_s": 1.0})
        summary = {k: v for k, v in header.items() if k != "subjects"}
        summary.update(counts={"pass": len(results)}, duration_s=1.0, complete=True, known_issues=[])
        write_json_atomic(folder / "summary.json", summary)
    else:
        writer.close()
    return folder


def _shards(tmp_path, count=2, overrides=None):
    """Shard folders; ``overrides`` maps a shard number to _write_shard keywords."""
    return [
        _write_shard(tmp_path / f"s{k}", k, count, part, **(overrides or {}).get(k, {}))
        for k, part in enumerate(_split(count), start=1)
    ]


def test_shards_merge_into_one_complete_folder_that_renders(tmp_path):
    folders = _shards(tmp_path, 3)
    merged = merge(tmp_path / "out", list(reversed(folders)))
    assert merged.complete and merged.shards == 3
    out = read_results(tmp_path / "out")
    assert out.complete and out.header["shard"] is None
    assert {r.key for r in out.results} == {r.key for r in report_folders.standard_results()}
    summary = read_summary(tmp_path / "out")
    assert summary["complete"] is True and summary["shard"] is None
    assert summary["counts"]["pass"] == len(report_folders.standard_results())
    assert write_report(tmp_path / "out", plots=False).exists()


@pytest.mark.parametrize(
    "change, label",
    [
        ({"profile": "dev"}, "--profile"),
        ({"hypothesis_seed": 7}, "--hypothesis-seed"),
        ({"impl": "xla"}, "--impl"),
        ({"jax": "0.9.2"}, "jax version"),
        ({"git_revision": "def456"}, "suite revision"),
    ],
)
def test_folders_of_different_runs_are_refused(tmp_path, change, label):
    folders = _shards(tmp_path, 2, {2: change})
    with pytest.raises(MergeError, match="different run") as error:
        merge(tmp_path / "out", folders)
    assert label in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_missing_shard_is_named(tmp_path):
    folders = _shards(tmp_path, 3)
    with pytest.raises(MergeError, match="shard 2 of 3 missing"):
        merge(tmp_path / "out", [folders[0], folders[2]])


def test_a_shard_given_twice_and_an_unsharded_folder_are_refused(tmp_path):
    folders = _shards(tmp_path, 2)
    with pytest.raises(MergeError, match="shard 1 of 2 given twice"):
        merge(tmp_path / "out", [folders[0], folders[0], folders[1]])
    whole = _write_shard(tmp_path / "whole", None, None, report_folders.standard_results())
    with pytest.raises(MergeError, match="not a sharded run"):
        merge(tmp_path / "out", [whole, folders[1]])


def test_overlapping_checks_are_refused(tmp_path):
    parts = _split(2)
    first = _write_shard(tmp_path / "s1", 1, 2, parts[0])
    second = _write_shard(tmp_path / "s2", 2, 2, parts[1] + parts[0][:1])
    with pytest.raises(MergeError, match="recorded in both"):
        merge(tmp_path / "out", [first, second])


def test_an_incomplete_shard_makes_the_merged_folder_incomplete(tmp_path):
    folders = _shards(tmp_path, 2, {2: {"complete": False}})
    merged = merge(tmp_path / "out", folders)
    assert not merged.complete
    assert not read_results(tmp_path / "out").complete
    assert read_summary(tmp_path / "out")["complete"] is False


def test_a_folder_being_written_is_refused_and_a_stale_lock_is_not(tmp_path):
    folders = _shards(tmp_path, 2)
    (tmp_path / "out").mkdir()
    for locked in (folders[1], tmp_path / "out"):
        hold = (
            "import sys, time; from run_records.folder_lock import FolderLock\n"
            "lock = FolderLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)"
        )
        holder = subprocess.Popen(
            [sys.executable, "-c", hold, str(locked)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            with pytest.raises(MergeError, match=f"{locked.name} is being written by pid {holder.pid}; wait"):
                merge(tmp_path / "out", folders)
        finally:
            holder.kill()
            holder.wait()
    (tmp_path / "out" / ".lock").write_text("999999\n")  # a pid in a file nobody locks: stale
    assert merge(tmp_path / "out", folders).complete


def test_the_merge_holds_its_output_folders_lock_while_it_writes(tmp_path, monkeypatch):
    folders = _shards(tmp_path, 2)
    out = tmp_path / "out"
    holders = []
    real_write = merge_module.write_text_atomic

    def write_and_look(path, text):
        holders.append(lock_holder(out))
        return real_write(path, text)

    monkeypatch.setattr(merge_module, "write_text_atomic", write_and_look)
    merge(out, folders)
    assert holders == [os.getpid()]  # a run started on OUT meanwhile would have been refused
    assert lock_holder(out) is None and not (out / ".lock").exists()

"""--shard K/N end to end: two shards of a small real run, merged, give the unsharded run's verdicts."""

from __future__ import annotations

import json

from reports.gate.comparison import gate
from reports.gate.thresholds import Thresholds
from run_records.results_file import read_results
from run_records.shard_merge import merge
from tests.support.suite import SMALL, run_suite, toy


def _verdicts(folder):
    return {r.key: r.verdict for r in read_results(folder).results}


def test_two_shards_merged_give_the_unsharded_runs_verdicts(tmp_path):
    whole = run_suite(tmp_path / "whole", toy("exact"), "-k", SMALL)
    assert whole.returncode == 0, whole.stdout[-3000:]
    shards = []
    for k in (1, 2):
        done = run_suite(tmp_path / f"shard{k}", toy("exact"), "-k", SMALL, "--shard", f"{k}/2")
        assert done.returncode in (0, 5), done.stdout[-3000:]  # 5: -k left this shard nothing
        header = read_results(tmp_path / f"shard{k}").header
        assert header["shard"] == {"index": k, "count": 2}
        summary = json.loads((tmp_path / f"shard{k}" / "summary.json").read_text())
        assert summary["shard"] == {"index": k, "count": 2}
        shards.append(tmp_path / f"shard{k}")
    parts = [set(_verdicts(folder)) for folder in shards]
    assert parts[0] and parts[1] and not parts[0] & parts[1]
    merged = merge(tmp_path / "merged", shards)
    assert merged.complete
    assert _verdicts(tmp_path / "merged") == _verdicts(tmp_path / "whole")
    assert read_results(tmp_path / "whole").header["shard"] is None
    verdict = gate(tmp_path / "whole", tmp_path / "merged", Thresholds())
    assert verdict.exit_code == 0
    resumed = run_suite(tmp_path / "shard1", toy("exact"), "-k", SMALL, "--shard", "2/2", "--resume")
    assert resumed.returncode == 4 and "recorded with --shard 1/2, not 2/2" in resumed.stdout + resumed.stderr


def test_a_bad_shard_is_a_one_line_usage_error(tmp_path):
    done = run_suite(tmp_path, toy("exact"), "--shard", "0/2")
    assert done.returncode == 4
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "--shard" in line]
    assert len(lines) == 1 and "e.g. --shard 1/2" in lines[0]


def test_shards_of_a_randomised_profile_need_one_shared_seed(tmp_path):
    # Without a shared seed each thorough shard would draw other cases, and the merge would
    # refuse them only after hours of work: refuse up front, in one line naming the fix.
    done = run_suite(tmp_path, toy("exact"), "--profile", "thorough", "--shard", "1/2")
    assert done.returncode == 4
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "--hypothesis-seed" in line]
    assert len(lines) == 1 and "needs --hypothesis-seed N" in lines[0], done.stdout + done.stderr
    assert not (tmp_path / "results.jsonl").exists()
    seeded = run_suite(
        tmp_path,
        toy("exact"),
        "--profile",
        "thorough",
        "--shard",
        "1/2",
        "--hypothesis-seed",
        "7",
        "-k",
        SMALL,
    )
    assert seeded.returncode in (0, 5), seeded.stdout[-3000:]

"""Every run folder records the tokamax version that ran (None when not installed), and folders
written before it was recorded still read: the library axis (jax, tokamax) of records."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from run_records import environment
from run_records.run_folder import load_run
from run_records.shard_merge import MergeError, merge
from tests.support.report_folders import standard_results, write_run


def test_the_environment_block_names_tokamax_and_says_none_when_it_is_not_installed(monkeypatch):
    real = importlib.metadata.version

    def without_tokamax(name: str) -> str:
        if name == "tokamax":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.0.11" if name == "tokamax" else real(name)
    )
    block = environment.environment_block()
    assert block["tokamax"] == "0.0.11" and block["libraries"]["tokamax"] == "0.0.11"
    assert "tokamax 0.0.11" in environment.one_line(block)
    monkeypatch.setattr(importlib.metadata, "version", without_tokamax)
    block = environment.environment_block()
    assert "tokamax" in block and block["tokamax"] is None  # recorded as absent, not left out
    assert "tokamax" not in block["libraries"]
    assert json.loads(json.dumps(block))["tokamax"] is None


@pytest.mark.parametrize(
    ("folder", "tokamax", "expected", "versions"),
    [
        ("jax-0.10.2", "0.0.12", "0.0.12", "0.10.2 + tokamax 0.0.12"),  # the record wins over the name
        ("jax-0.10.2", None, None, "0.10.2"),  # a folder written before tokamax was recorded
        ("jax-0.9.2-tokamax-0.0.11", None, "0.0.11", "0.9.2 + tokamax 0.0.11"),  # named, not recorded
        ("jax-0.9.2-tokamax-0.0.11", "0.0.11", "0.0.11", "0.9.2 + tokamax 0.0.11"),
    ],
)
def test_a_run_reads_its_tokamax_from_the_record_else_from_the_folder_name(
    tmp_path, folder, tokamax, expected, versions
):
    jax = folder.split("-")[1]
    run = load_run(write_run(tmp_path / folder, standard_results()[:4], jax=jax, tokamax=tokamax))
    assert run.jax_version == jax  # never "0.9.2-tokamax-0.0.11"
    assert run.tokamax_version == expected
    assert run.versions == versions
    assert run.label == f"jax {versions} ({folder})"


def test_an_explicit_none_means_no_tokamax_ran_whatever_the_folder_is_called(tmp_path):
    folder = write_run(tmp_path / "jax-0.10.2-tokamax-0.0.12", standard_results()[:4])
    summary = json.loads((folder / "summary.json").read_text())
    summary["environment"]["tokamax"] = None
    (folder / "summary.json").write_text(json.dumps(summary))
    assert load_run(folder).tokamax_version is None


def test_shards_with_different_tokamax_are_not_one_run(tmp_path):
    from run_records.results_file import ResultsWriter, write_json_atomic
    from tests.support.report_folders import environment as env

    shards = []
    for index, tokamax in ((1, "0.0.11"), (2, "0.0.12")):
        folder = tmp_path / f"shard-{index}"
        header = {"profile": "ci", "impl": "x", "subjects": ["xla"], "hypothesis_seed": 1}
        header |= {"shard": {"index": index, "count": 2}, "environment": env("0.10.2", tokamax)}
        writer = ResultsWriter(folder, header)
        writer.finish({})
        write_json_atomic(folder / "summary.json", {"environment": env("0.10.2", tokamax)})
        shards.append(folder)
    with pytest.raises(MergeError, match="tokamax version '0.0.12'"):
        merge(tmp_path / "out", shards)


def test_a_report_is_titled_by_the_pair_that_ran(tmp_path):
    from reports.run_report.render import write_report

    old = write_run(tmp_path / "jax-0.10.2", standard_results()[:4])
    new = write_run(tmp_path / "jax-0.10.2-tokamax-0.0.12", standard_results()[:4], tokamax="0.0.12")
    assert write_report(old, plots=False).read_text().startswith("# Conformance report · jax 0.10.2\n")
    title = write_report(new, plots=False).read_text().splitlines()[0]
    assert title == "# Conformance report · jax 0.10.2 + tokamax 0.0.12"

"""Listing JAX releases for bisection: pip's output, an offline list, and the span between two."""

from __future__ import annotations

import subprocess

import pytest

from reports.bisection.release_versions import (
    VersionListError,
    between,
    index_versions,
    parse_offline,
    parse_pip_index,
)

PIP_OUTPUT = """\
WARNING: pip index is currently an experimental command. It may be removed/changed in a future release.
WARNING: Location 'file:///somewhere/simple/jax/' is ignored: it is neither a file nor a directory.
jax (0.10.2)
Available versions: 0.10.2, 0.10.1, 0.9.0.1, 0.9.0, 0.8.3, 0.8.2, 0.8.1, 0.8.0, 0.7.2, 0.7.0rc1, 0.4.38, 0.1
"""


def test_pip_output_gives_final_releases_oldest_first():
    assert parse_pip_index(PIP_OUTPUT) == [
        "0.1", "0.4.38", "0.7.2", "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.9.0", "0.9.0.1", "0.10.1", "0.10.2",
    ]  # fmt: skip


def test_pip_output_without_the_list_is_one_line_naming_the_offline_fix():
    with pytest.raises(VersionListError) as exc:
        parse_pip_index("WARNING: something\nERROR: No matching distribution found for jax\n")
    assert "\n" not in str(exc.value)
    assert "ERROR: No matching distribution found for jax" in str(exc.value) and "--versions" in str(
        exc.value
    )


def test_offline_list_is_sorted_and_deduplicated():
    assert parse_offline(" 0.8.1,0.7.2, 0.10.2,0.8.1 ") == ["0.7.2", "0.8.1", "0.10.2"]


@pytest.mark.parametrize(
    ("text", "expected"), [("0.7.2,latest", "'latest' is not a release number"), (" , ", "empty")]
)
def test_offline_list_bad_entries_are_one_line(text, expected):
    with pytest.raises(VersionListError) as exc:
        parse_offline(text)
    assert expected in str(exc.value) and "\n" not in str(exc.value)


def test_between_is_inclusive_in_either_order():
    versions = ["0.10.2", "0.7.2", "0.8.0", "0.8.1", "0.9.0", "0.6.2"]
    assert between(versions, "0.8.1", "0.7.2") == ["0.7.2", "0.8.0", "0.8.1"]
    assert between(versions, "0.7.2", "0.10.2") == ["0.7.2", "0.8.0", "0.8.1", "0.9.0", "0.10.2"]


def test_index_versions_asks_pip_and_reads_its_answer():
    seen = []

    def run(command, **kwargs):
        seen.append(command)
        return subprocess.CompletedProcess(command, 0, PIP_OUTPUT, "")

    assert index_versions("jax", run=run)[-1] == "0.10.2"
    assert seen[0][-6:-2] == ["pip", "index", "versions", "jax"]
    # as the newest Python of the version table sees the index: jax 0.11 on is listed from 3.11 too
    assert seen[0][-2:] == ["--python-version", "3.12"]


def test_index_versions_failure_is_one_line():
    def run(command, **kwargs):
        return subprocess.CompletedProcess(
            command, 1, "", "Looking in indexes\nERROR: Could not reach the index\n"
        )

    with pytest.raises(VersionListError) as exc:
        index_versions("jax", run=run)
    assert "ERROR: Could not reach the index" in str(exc.value) and "--versions" in str(exc.value)
    assert "\n" not in str(exc.value)

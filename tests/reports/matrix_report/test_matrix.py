"""The version matrix: subject x version, ratio drift, capability changes, unreadable folders."""

from __future__ import annotations

import dataclasses

import pytest

from reports.__main__ import main
from reports.matrix_report.version_matrix import (
    capability_changes,
    case_drifts,
    discover,
    load_matrix,
    render_matrix,
    write_matrix,
)
from run_records.results_file import ResultsFileError
from tests.support.report_folders import standard_results, with_verdict, write_run

VERSIONS = ("0.9.2", "0.4.38", "0.10.2", "0.6.2")  # written out of order on purpose


def _broken_at_0_6_2(results):
    victim = next(
        r
        for r in results
        if r.case.subject == "xla"
        and r.check == "backward"
        and r.case.q_len == 1000
        and r.case.dtype == "bfloat16"
    )
    return with_verdict(victim, "fail", 8.0)


def _lost_segments(results):
    return [
        dataclasses.replace(r, verdict="unsupported", metrics=(), reason="segment ids not supported")
        for r in results
        if r.case.subject == "flash" and "segment_ids" in r.features
    ]


@pytest.fixture
def root(tmp_path):
    for version in VERSIONS:
        index = sorted(VERSIONS, key=lambda v: tuple(map(int, v.split(".")))).index(version)
        results = standard_results(drift=1 + 0.05 * index)
        extra = []
        if version == "0.6.2":
            extra.append(_broken_at_0_6_2(results))
        if version == "0.10.2":
            extra += _lost_segments(results)
        write_run(
            tmp_path / f"jax-{version}",
            standard_results(drift=1 + 0.05 * index, extra=extra),
            jax=version,
            complete=version != "0.9.2",
        )
    (tmp_path / "matrix").mkdir()  # the output folder is not a version
    return tmp_path


def test_discover_and_order(root):
    assert [p.name for p in discover(root)] == sorted(f"jax-{v}" for v in VERSIONS)
    matrix = load_matrix(discover(root))
    assert matrix.versions == ("0.4.38", "0.6.2", "0.9.2", "0.10.2")  # numeric, not alphabetical
    assert matrix.subjects == ("flash", "gpu_triton", "xla")


def test_matrix_report(root):
    text = render_matrix(load_matrix(discover(root)))
    lines = text.splitlines()
    assert lines[2] == (
        "**❌ FAILURES** in 1 version of 4 JAX versions (0.4.38 … 0.10.2): "
        "0.6.2: 1 root cause (1 failing check in 1 case); ⚠️ incomplete: 0.9.2."
    )
    assert "| subject | 0.4.38 | 0.6.2 | 0.9.2 | 0.10.2 |" in text
    assert "| **xla** | ✅ 26 | ❌ 1/26 · 1 root cause (backward, bfloat16) | ✅ 26 | ✅ 26 |" in text
    assert "| **flash** | ✅ 26 · ➖ 1 | ✅ 26 · ➖ 1 | ✅ 26 · ➖ 1 | ✅ 24 · ➖ 3 |" in text
    assert "| **gpu_triton** | 🚫 | 🚫 | 🚫 | 🚫 |" in text
    # Ratio drift per subject and dtype, with the change from the previous version.
    assert (
        "| xla · bfloat16 | 1.55 · med 1.33 | 8 (×5.16) · med 1.39 | 1.71 (÷4.69) · med 1.46 | 1.78 (+5%)"
        in text
    )
    # The per-check move that matters, and the capability that vanished.
    assert "| xla | backward | `bfloat16-L1000-full-nomask-s0` | 0.4.38 → 0.6.2 | 1.55 → 8 | ×5.16 |" in text
    assert "| flash | segment ids | 0.9.2 → 0.10.2 | ✅ pass → ➖ unsupported |" in text
    assert "| 0.9.2 | `jax-0.9.2` | 54 | ⚠️ **no** |" in text


def test_small_moves_are_not_listed(root):
    matrix = load_matrix(discover(root))
    moves = case_drifts(matrix)
    assert {row[3] for row in moves} == {
        "0.4.38 → 0.6.2",
        "0.6.2 → 0.9.2",
    }  # only the broken check moved >20%


def test_unreadable_folder_is_listed_and_the_rest_render(root):
    (root / "jax-0.5.3").mkdir()
    (root / "jax-0.5.3" / "results.jsonl").write_text("{broken\n", encoding="utf-8")
    text = render_matrix(load_matrix(discover(root)))
    assert "1 folder unreadable" in text.splitlines()[2]
    assert "- `jax-0.5.3`: " in text and "results.jsonl:1: corrupt line" in text


def test_write_matrix_with_plots_and_links(root, capsys):
    assert main(["render", str(root / "jax-0.6.2"), "--no-plots"]) == 0
    capsys.readouterr()
    assert main(["matrix", str(root)]) == 0
    path = root / "matrix" / "report.md"
    assert capsys.readouterr().out.strip() == str(path)
    text = path.read_text(encoding="utf-8")
    for name in ("ratio-vs-version.png", "ratio-vs-length-by-version.png"):
        png = root / "matrix" / name
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000
        assert f"]({name})" in text
    assert "[jax-0.6.2](../jax-0.6.2/report.md)" in text  # linked where a per-version report exists


def test_duplicate_versions_use_folder_names(tmp_path):
    write_run(tmp_path / "jax-0.10.2", standard_results())
    write_run(tmp_path / "jax-0.10.2-tpu", standard_results())
    matrix = load_matrix(discover(tmp_path))
    assert matrix.versions == ("jax-0.10.2", "jax-0.10.2-tpu")


def test_no_readable_folder_is_an_error(tmp_path):
    with pytest.raises(ResultsFileError, match="no jax-\\* folders"):
        write_matrix(tmp_path, plots=False)


def test_cells_an_incomplete_run_never_reached_are_not_changes(tmp_path):
    results = standard_results()
    write_run(tmp_path / "jax-0.9.2", results, jax="0.9.2")
    cut = [r for r in results if "segment_ids" not in r.features]
    write_run(tmp_path / "jax-0.10.2", cut, complete=False)
    matrix = load_matrix(discover(tmp_path))
    assert capability_changes(matrix) == []  # segment ids were simply not reached yet


def test_moves_among_tiny_ratios_are_noise(tmp_path):
    results = standard_results(drift=0.01)  # every ratio ~0.01: near-exact
    write_run(tmp_path / "jax-0.9.2", results, jax="0.9.2")
    write_run(tmp_path / "jax-0.10.2", standard_results(drift=0.03))  # tripled, still tiny
    assert case_drifts(load_matrix(discover(tmp_path))) == []


def test_a_version_where_nothing_was_checked_says_not_run(tmp_path):
    write_run(tmp_path / "jax-0.10.2", standard_results())
    only_unsupported = [r for r in standard_results() if r.verdict in ("unsupported", "unavailable")]
    write_run(tmp_path / "jax-0.4.35", only_unsupported, jax="0.4.35")
    text = render_matrix(load_matrix(discover(tmp_path)))
    assert "⛔ NOT RUN (nothing was checked): 0.4.35" in text.splitlines()[2]
    assert "| **flash** | ⛔ nothing checked (➖ 1 unsupported) | ✅ 26 · ➖ 1 |" in text


def test_columns_are_keyed_by_jax_and_tokamax_and_folders_without_tokamax_still_read(tmp_path):
    write_run(tmp_path / "jax-0.10.2", standard_results())  # written before tokamax was recorded
    write_run(tmp_path / "jax-0.10.2-tokamax-0.0.12", standard_results(), tokamax="0.0.12")
    write_run(tmp_path / "jax-0.10.2-tokamax-0.0.10", standard_results(), tokamax="0.0.10")
    write_run(tmp_path / "jax-0.9.2-tokamax-0.0.11", standard_results(), jax="0.9.2", tokamax="0.0.11")
    broken = _broken_at_0_6_2(standard_results())
    write_run(
        tmp_path / "jax-0.10.2-tokamax-0.0.11",
        standard_results(extra=[broken]),
        tokamax="0.0.11",
    )
    matrix = load_matrix(discover(tmp_path))
    assert matrix.versions == (
        "0.9.2 + tokamax 0.0.11",
        "0.10.2",
        "0.10.2 + tokamax 0.0.10",  # tokamax in release order at one jax, none first
        "0.10.2 + tokamax 0.0.11",
        "0.10.2 + tokamax 0.0.12",
    )
    text = render_matrix(matrix)
    assert text.startswith("# Conformance matrix · JAX and tokamax versions")
    header = next(line for line in text.splitlines() if line.startswith("| subject |"))
    assert "| 0.10.2 + tokamax 0.0.12 |" in header and "| 0.10.2 |" in header
    assert (
        "in 1 version of 5 jax + tokamax versions (0.9.2 + tokamax 0.0.11 … 0.10.2 + tokamax 0.0.12)" in text
    )
    assert "0.10.2 + tokamax 0.0.11: " in text  # the failing column is named by its pair


def test_a_ledger_entry_with_a_tokamax_range_shows_it_beside_the_jax_range(tmp_path):
    import json

    statuses = {
        "0.0.11": {"id": "tk", "jax": ">=0.9.2", "tokamax": "<0.0.12", "status": "reproduced"},
        "0.0.12": {"id": "tk", "jax": ">=0.9.2", "tokamax": "<0.0.12", "status": "out of range"},
    }
    for tokamax, status in statuses.items():
        folder = write_run(tmp_path / f"jax-0.10.2-tokamax-{tokamax}", standard_results(), tokamax=tokamax)
        summary = json.loads((folder / "summary.json").read_text())
        (folder / "summary.json").write_text(json.dumps({**summary, "known_issues": [status]}))
    text = render_matrix(load_matrix(discover(tmp_path)))
    assert "| entry | jax range | tokamax range | 0.10.2 + tokamax 0.0.11 | 0.10.2 + tokamax 0.0.12 |" in text
    assert "| `tk` | `>=0.9.2` | `<0.0.12` | 🐞 | · | agrees |" in text

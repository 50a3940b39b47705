"""Bad input to the report tools: one clear line naming the file and line, exit 2, never a traceback."""

from __future__ import annotations

import json

import pytest

from reports.__main__ import main
from reports.gate.findings import EXIT_BAD_INPUT, EXIT_PASS, EXIT_REGRESSION
from run_records.results_file import ResultsFileError, read_results
from tests.support.report_folders import standard_results, write_run


@pytest.fixture
def good(tmp_path):
    return write_run(tmp_path / "jax-0.9.2", standard_results(), jax="0.9.2")


def _candidate(tmp_path, text: str | bytes | None, summary: str | None = None):
    folder = tmp_path / "jax-0.10.2"
    folder.mkdir()
    if text is not None:
        path = folder / "results.jsonl"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    if summary is not None:
        (folder / "summary.json").write_text(summary, encoding="utf-8")
    return folder


def _lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _gate_error(capsys, *args) -> str:
    code = main(["gate", *map(str, args)])
    captured = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("error: ")
    return err


def test_missing_folder(tmp_path, good, capsys):
    err = _gate_error(capsys, good, tmp_path / "jax-9.9.9")
    assert "jax-9.9.9: no results file" in err and "nox -s conformance" in err


def test_folder_without_results(tmp_path, good, capsys):
    err = _gate_error(capsys, good, _candidate(tmp_path, None))
    assert "jax-0.10.2/results.jsonl: no results file" in err


def test_empty_results_file(tmp_path, good, capsys):
    err = _gate_error(capsys, good, _candidate(tmp_path, ""))
    assert "results.jsonl: the results file is empty" in err


def test_corrupt_line_names_the_line(tmp_path, good, capsys):
    lines = _lines(good / "results.jsonl")
    lines[5] = "{this is not json\n"
    err = _gate_error(capsys, good, _candidate(tmp_path, "".join(lines)))
    assert "jax-0.10.2/results.jsonl:6: corrupt line" in err


def test_binary_garbage(tmp_path, good, capsys):
    err = _gate_error(capsys, good, _candidate(tmp_path, b"\x00\xff\xfe garbage\n\x89PNG\n"))
    assert "results.jsonl:1: corrupt line" in err


def test_schema_mismatch_names_the_line(tmp_path, good, capsys):
    lines = _lines(good / "results.jsonl")
    record = json.loads(lines[3])
    record["schema"] = 99
    lines[3] = json.dumps(record) + "\n"
    err = _gate_error(capsys, good, _candidate(tmp_path, "".join(lines)))
    assert "results.jsonl:4: schema version 99, this tool reads 1" in err


def test_malformed_record(tmp_path, good, capsys):
    lines = _lines(good / "results.jsonl")
    record = json.loads(lines[2])
    del record["case"]["case_id"]
    lines[2] = json.dumps(record) + "\n"
    err = _gate_error(capsys, good, _candidate(tmp_path, "".join(lines)))
    assert "results.jsonl:3: malformed case record" in err


def test_not_a_results_file(tmp_path, good, capsys):
    err = _gate_error(
        capsys, good, _candidate(tmp_path, '{"kind": "case", "schema": 1}\n'.replace("case", "end"))
    )
    assert "results.jsonl:1: no run header" in err


def test_corrupt_summary(tmp_path, good, capsys):
    folder = _candidate(
        tmp_path, (good / "results.jsonl").read_text(encoding="utf-8"), summary='{\n  "a": 1,\n  oops\n'
    )
    err = _gate_error(capsys, good, folder)
    assert "jax-0.10.2/summary.json:3: corrupt summary" in err


def test_corrupt_benchmarks(tmp_path, good, capsys):
    folder = _candidate(tmp_path, (good / "results.jsonl").read_text(encoding="utf-8"))
    (folder / "benchmarks.json").write_text('{"benchmarks": [\n{"name": }\n]}', encoding="utf-8")
    (good / "benchmarks.json").write_text('{"benchmarks": []}', encoding="utf-8")
    err = _gate_error(capsys, good, folder)
    assert "jax-0.10.2/benchmarks.json:2: corrupt benchmark JSON" in err


def test_benchmarks_in_another_format(tmp_path, good, capsys):
    folder = _candidate(tmp_path, (good / "results.jsonl").read_text(encoding="utf-8"))
    (folder / "benchmarks.json").write_text('{"results": []}', encoding="utf-8")
    assert "no 'benchmarks' list" in _gate_error(capsys, good, folder)
    (folder / "benchmarks.json").write_text('{"benchmarks": [{"name": "x", "stats": {}}]}', encoding="utf-8")
    assert "benchmarks[0] has no name or no numeric stats.median" in _gate_error(capsys, good, folder)


def test_truncated_results_still_work_marked_incomplete(tmp_path, good, capsys):
    """kill -9 mid-write: the torn last line is dropped, the rest is judged, the run is incomplete."""
    data = (good / "results.jsonl").read_bytes()
    cut = data[: data.rfind(b'{"kind": "end"') - 40]  # lose the footer and half of the last case
    folder = _candidate(tmp_path, cut, summary=(good / "summary.json").read_text(encoding="utf-8"))
    parsed = read_results(folder)
    assert parsed.torn_last_line and not parsed.complete and len(parsed.results) == 53
    assert main(["gate", str(good), str(folder)]) == EXIT_REGRESSION
    assert "⚠️ **incomplete**" in capsys.readouterr().out
    assert main(["gate", str(good), str(folder), "--allow-incomplete"]) == EXIT_PASS
    assert main(["render", str(folder), "--no-plots"]) == 0
    assert "Incomplete run" in (folder / "report.md").read_text(encoding="utf-8")
    capsys.readouterr()


def test_render_and_matrix_report_bad_input_the_same_way(tmp_path, capsys):
    folder = _candidate(tmp_path, "")
    assert main(["render", str(folder)]) == EXIT_BAD_INPUT
    assert "results.jsonl: the results file is empty" in capsys.readouterr().err
    assert main(["matrix", str(tmp_path / "nowhere")]) == EXIT_BAD_INPUT
    assert "no readable jax-*/results.jsonl" in capsys.readouterr().err


def test_read_results_error_type(tmp_path):
    with pytest.raises(ResultsFileError, match="no results file"):
        read_results(tmp_path)

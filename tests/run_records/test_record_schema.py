"""Records before the feature table (schema 1: a fixed list of case fields) still read, and a
gate between a folder of each gives the verdict two folders of one schema give."""

from __future__ import annotations

import json

from reports.__main__ import main
from run_records.results_file import read_results
from tests.support.report_folders import standard_results, with_verdict, write_run


def _as_schema_1(folder) -> None:
    """Rewrite a folder's records the way the suite wrote them before schema 2: every case
    field flat beside the id, masks as names, no words."""
    path = folder / "results.jsonl"
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record["schema"] = 1
        if record["kind"] == "case":
            case = record["case"]
            fields = case.pop("fields")
            case.pop("words")
            record["case"] = {**case, **fields, "masks": ["segment_ids"], "bias_shape": [1, 1, 1, 128]}
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


def test_a_schema_1_record_reads_with_its_fields_and_words(tmp_path):
    folder = write_run(tmp_path / "old", standard_results())
    _as_schema_1(folder)
    read = read_results(folder)
    first = read.results[0].case
    assert (
        first.q_len == int(first.case_id.split("-L")[1].split("-")[0])
        and first.batch == 2
        and first.get("input_kind", "normal") == "normal"
    )
    assert first.words.endswith("segment ids, bias [1, 1, 1, 128]")


def test_a_gate_from_a_schema_1_base_gives_the_same_verdict_as_from_a_schema_2_one(tmp_path, capsys):
    base = standard_results()
    broken = with_verdict(base[0], "fail", 8.0, reason="out out of tolerance")
    candidate = write_run(tmp_path / "jax-0.10.2", standard_results(extra=[broken]))
    verdicts = []
    for schema in (2, 1):
        folder = write_run(tmp_path / f"base-{schema}", base, jax="0.9.2")
        if schema == 1:
            _as_schema_1(folder)
        code = main(["gate", str(folder), str(candidate)])
        out = capsys.readouterr().out
        verdicts.append(
            (code, out.splitlines()[0].replace(folder.name, "BASE"), "Newly failing: 1 finding" in out)
        )
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] != 0  # the planted regression is found from either base

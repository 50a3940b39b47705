"""Ledgers written for a test and the failing record they are matched against."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conformance.judge.known_issues import Ledger, load_ledger
from conformance.suite.check_registry import CHECKS
from tests.support.report_folders import result

SUBJECTS = ("tpu_flash", "xla")


def load(tmp_path: Path, text: str, name: str = "ledger.toml") -> Ledger:
    path = tmp_path / name
    path.write_text(text)
    return load_ledger([path], subjects=SUBJECTS, checks=CHECKS)


def failing(
    check="forward",
    case_id="tpu_flash-float32-seg3x-B2-Hq1-Hkv1-Sq256-Sk256-D64-nan_padding",
    verdict="fail",
    dtype="float32",
    input_kind="nan_padding",
    features=("segment_ids",),
):
    record = result(
        "tpu_flash", check, verdict, case_id=case_id, dtype=dtype, features=(check, dtype, *features)
    )
    fields = {**dict(record.case.fields), "input_kind": input_kind}
    return dataclasses.replace(record, case=dataclasses.replace(record.case, fields=fields))

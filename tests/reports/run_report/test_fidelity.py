"""The report's table of interpreter-only verdicts (reports/run_report/fidelity.py)."""

from __future__ import annotations

import dataclasses

from reports.run_report.fidelity import fidelity_section, subject_fidelity
from reports.run_report.render import render_markdown
from run_records.run_folder import load_run
from tests.support.report_folders import result, standard_results, write_run


def ran(r, execution: str, platform: str = ""):
    """``r`` as run by ``execution`` (its availability), lowered for ``platform``."""
    availability = {"available": r.verdict != "unavailable", "execution": execution}
    details = {"platform": platform} if platform else {}
    return dataclasses.replace(r, availability=availability, details=details)


def interpreted_subject() -> list:
    forward = [ran(result("splash", "forward", length=n), "interpret") for n in (128, 129)]
    lowering = [
        ran(result("splash", "lowers", ratio=None, length=128), "interpret", "tpu"),
        ran(result("splash", "lowers", "fail", ratio=None, length=129), "interpret", "tpu"),
        dataclasses.replace(
            ran(result("splash", "observable", "known", ratio=None, length=128), "interpret", "tpu"),
            known_issue={
                "id": "splash-no-cost-estimate",
                "link": "https://github.com/jax-ml/jax/issues/29463",
            },
        ),
        ran(result("splash", "vmem", "unsupported", ratio=None, length=129), "interpret", "tpu"),
    ]
    return forward + lowering


def test_an_interpreted_subject_splits_its_verdicts_into_the_interpreters_and_the_hardwares():
    (row,) = subject_fidelity(interpreted_subject())
    assert (row.subject, row.execution, row.platform) == ("splash", "interpret", "tpu")
    assert row.interpreted == {"forward": 2}
    assert row.lowered["lowers"] == {"pass": 1, "fail": 1}
    assert "vmem" not in row.lowered  # unsupported is not a verdict on the hardware
    section = fidelity_section(interpreted_subject())
    assert "| **splash** | interpreter | 2 (forward) | for TPU: lowers: 1 of 2 pass, 1 fail" in section
    assert "observable: 0 of 1 pass, 1 known" in section


def test_native_subjects_get_no_row_and_a_fully_native_run_no_section():
    native = [ran(r, "native") for r in standard_results() if r.verdict != "unavailable"]
    assert fidelity_section(native) is None
    rows = subject_fidelity([*native, *interpreted_subject()])
    assert [r.subject for r in rows] == ["splash"]


def test_an_interpreted_subject_without_lowering_says_every_verdict_is_the_interpreters():
    only_math = [ran(result("mutant", "forward"), "interpret")]
    assert "every verdict is the interpreter's" in fidelity_section(only_math)


def test_a_subject_that_cannot_run_but_lowers_is_listed_as_lowered_only():
    ragged = [
        ran(result("ragged", "forward", "unavailable", ratio=None), "interpret"),
        ran(result("ragged", "lowers", ratio=None), "interpret", "tpu"),
    ]
    ragged = [dataclasses.replace(r, availability={"available": False}) for r in ragged]
    (row,) = subject_fidelity(ragged)
    assert row.execution == "not run" and row.interpreted == {}
    assert "not run here (lowered only) | none | for TPU: lowers: 1 of 1 pass" in fidelity_section(ragged)


def test_the_report_folds_the_table_after_the_grid(tmp_path):
    folder = write_run(tmp_path / "run", interpreted_subject())
    text = render_markdown(load_run(folder))
    fold = "<details><summary>What holds on hardware (interpreter verdicts vs lowered)</summary>"
    assert text.index("<details><summary>Grid") < text.index(fold)

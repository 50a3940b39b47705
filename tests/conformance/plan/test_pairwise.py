"""Pairwise coverage of optional inputs (conformance/plan/pairwise.py) and its report section."""

from __future__ import annotations

import pytest

from conformance.plan import catalogue, pairwise, profiles
from conformance.plan.cases import Case
from conformance.plan.subjects import resolve_subjects
from kernels.contract.base import Capabilities
from reports.run_report.pairwise_table import pairwise_section
from tests.support.fakes import EVERY_FEATURE

THREE = Capabilities(dtypes=("float32",), bias=True, gqa=True, window=True)
# A bias brings its fill (-inf and large negatives in it), which exists only with a bias.
NO_FILL_WITHOUT_BIAS = {
    ("bias", False, "bias_fill", True): "bias_fill needs bias: no case has one without the other"
}


def plain(subject: str = "s") -> Case:
    return Case(subject, "float32", batch=2, q_heads=2, kv_heads=2)


def test_covering_cases_complete_every_pair_from_a_plan_that_has_none():
    runs = catalogue.runs_forward(THREE)
    added, excluded = pairwise.covering_cases("s", THREE, "float32", [plain()], runs)
    assert excluded == NO_FILL_WITHOUT_BIAS and 1 <= len(added) <= 5
    assert all(runs(c) is None for c in added)
    result = pairwise.coverage("s", THREE, [plain(), *added], excluded)
    assert result.features == ("bias", "bias_fill", "gqa", "window")
    assert (result.covered, result.total, result.uncovered) == (23, 24, ())


def test_a_pair_the_declaration_forbids_is_ruled_out_with_its_reason_not_uncovered():
    def runs(case: Case) -> str | None:
        if case.bias is not None and case.window is not None:
            return "bias_with_window: the kernel raises"
        return catalogue.runs_forward(THREE)(case)

    added, excluded = pairwise.covering_cases("s", THREE, "float32", [plain()], runs)
    assert excluded == {
        ("bias", True, "window", True): "bias_with_window: the kernel raises",
        ("bias_fill", True, "window", True): "bias_with_window: the kernel raises",
        **NO_FILL_WITHOUT_BIAS,
    }
    result = pairwise.coverage("s", THREE, [plain(), *added], excluded)
    assert result.uncovered == () and result.covered == 21
    record = result.as_record()
    assert {"combination": "bias + window", "reason": "bias_with_window: the kernel raises"} in record[
        "excluded"
    ]


def test_a_combination_no_case_holds_is_reported_uncovered():
    result = pairwise.coverage("s", THREE, [plain()], {})
    assert "bias + gqa" in [pairwise.describe(c) for c in result.uncovered]
    assert "no bias + no gqa" not in [pairwise.describe(c) for c in result.uncovered]
    assert result.covered == 6  # the plain case holds "no x + no y" for each of the six pairs


def test_every_optional_input_is_declared_by_a_subject_declaring_every_feature():
    names = {f.name for f in pairwise.declared_features(EVERY_FEATURE)}
    assert names == {f.name for f in pairwise.FEATURES} - {"config"}


@pytest.mark.parametrize("name", ["tpu_flash", "splash", "xla"])
def test_ci_leaves_no_pair_of_optional_inputs_uncovered(name):
    (subject,) = resolve_subjects(name)
    if not subject.available:
        pytest.skip(f"{name} unavailable: {subject.reason}")
    cases = catalogue.cases_for(subject, profiles.get("ci"), 0)
    result = catalogue.pairwise_coverage(subject, cases)
    assert result.total > 0 and not result.uncovered, [pairwise.describe(c) for c in result.uncovered]


def test_the_report_section_lists_coverage_rulings_and_gaps():
    summary = {
        "pairwise": {
            "s": pairwise.coverage(
                "s", THREE, [plain()], {("bias", True, "window", True): "forbidden"}
            ).as_record(),
            "bare": {"features": [], "combinations": 0, "covered": 0, "excluded": [], "uncovered": []},
        }
    }
    text = pairwise_section(summary)
    assert (
        "| **s** | bias, bias_fill, gqa, window | 6 of 24 | bias + window (forbidden) | ⚠️ bias + bias_fill"
        in text
    )
    assert "bare" not in text
    assert pairwise_section({}) is None

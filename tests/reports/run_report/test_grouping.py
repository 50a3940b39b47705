"""Failing checks grouped by cause (run_report/grouping.py): what joins one finding and what does not."""

from __future__ import annotations

import dataclasses

from reports.run_report.grouping import (
    count_line,
    group_failures,
    minimal_case_id,
    template_id,
    template_key,
)
from run_records.results_file import case_result_from_json, case_result_to_json
from tests.support.report_folders import result

MASK_CHECKS = ("forward", "lse", "finite", "fully_masked")


def failing(check="forward", dtype="float32", length=129, *, ratio=5.0, minimal=None, **kwargs):
    r = result("flash", check, "fail", dtype=dtype, length=length, ratio=ratio, causal=True, **kwargs)
    return dataclasses.replace(r, details={"minimal_case_id": minimal}) if minimal else r


def one_cause(length=129, **kwargs):
    """The same case failing forward, lse, finite and fully_masked in float32 and bfloat16."""
    return [failing(c, d, length, **kwargs) for c in MASK_CHECKS for d in ("float32", "bfloat16")]


def test_template_is_the_case_id_without_its_dtype():
    case_id = "tpu_flash-bfloat16-causal_tl-B2-Hq4-Hkv4-Sq128-Sk256-D128"
    assert template_id(case_id, "bfloat16") == "tpu_flash-*-causal_tl-B2-Hq4-Hkv4-Sq128-Sk256-D128"
    assert template_id(case_id) == template_id(case_id.replace("bfloat16", "float32"))  # dtype unknown
    assert (
        template_id("xla-float16-full-B1-Hq1-Hkv1-Sq1-Sk1-D64-large")
        == "xla-*-full-B1-Hq1-Hkv1-Sq1-Sk1-D64-large"
    )


def test_one_case_across_checks_and_dtypes_is_one_finding():
    (group,) = group_failures(one_cause())
    assert len(group.results) == 8
    assert (
        group.summary() == "forward, lse, fully_masked, finite fail in float32 and bfloat16"
    )  # report order
    assert group.label == "*-L129-causal-nomask-s0"
    assert group.case_ids == ("bfloat16-L129-causal-nomask-s0", "float32-L129-causal-nomask-s0")
    assert count_line([group]) == "1 finding (8 failing checks)"


def test_other_shapes_features_subjects_and_input_kinds_are_other_findings():
    base = failing()
    others = [
        failing(length=1000),  # another shape
        failing(masks=("segment_ids",)),  # another feature
        dataclasses.replace(base, case=dataclasses.replace(base.case, subject="xla")),  # another subject
        failing(case_id="float32-L129-causal-nomask-s0-large"),  # another input kind
    ]
    groups = group_failures([base, *others])
    assert len(groups) == 5 and all(len(g.results) == 1 for g in groups)
    assert len({template_key(r) for r in [base, *others]}) == 5


def test_cases_shrunk_to_the_same_minimal_case_are_one_finding():
    # Two shapes fail; shrinking took each to the same 7-long case (in its own dtype). The check
    # that was not shrunk (lse of the 1000-long case) joins through its own case's template.
    a = failing("forward", "float32", 129, minimal="float32-L7-causal-nomask-s0")
    b = failing("forward", "bfloat16", 1000, minimal="bfloat16-L7-causal-nomask-s0")
    b_lse = failing("lse", "bfloat16", 1000)
    unrelated = failing("forward", "float32", 113)
    groups = group_failures([a, b, b_lse, unrelated])
    assert [len(g.results) for g in groups] == [3, 1]
    joined = groups[0]
    assert joined.templates == ("*-L1000-causal-nomask-s0", "*-L129-causal-nomask-s0")
    assert joined.label == "*-L1000-causal-nomask-s0 (+1 more case)"
    assert joined.minimal_case_ids == ("bfloat16-L7-causal-nomask-s0", "float32-L7-causal-nomask-s0")
    # The minimal case's own failure, recorded by another run or a --case, joins as well.
    own = failing("forward", "float32", 7)
    assert len(group_failures([a, b, own])) == 1


def test_old_records_name_the_shrunk_case_only_in_the_reason():
    old = failing(
        reason="out of tolerance\nShrunk to a smaller failing case: float32-L7-causal-nomask-s0 (q 7)"
    )
    assert minimal_case_id(old) == "float32-L7-causal-nomask-s0"
    assert len(group_failures([old, failing(length=7)])) == 1
    assert minimal_case_id(failing()) is None


def test_minimal_case_id_survives_results_jsonl():
    shrunk = failing(minimal="float32-L7-causal-nomask-s0")
    again = case_result_from_json(case_result_to_json(shrunk))
    assert minimal_case_id(again) == "float32-L7-causal-nomask-s0"


def test_worst_member_and_the_repro_shown():
    members = one_cause()
    worst = failing("lse", "bfloat16", ratio=40.0)
    members = [m for m in members if m.key != worst.key] + [worst]
    (group,) = group_failures(members)
    assert group.worst.key == worst.key and group.worst_excess > 10
    assert group.repro_result.key == worst.key  # nothing shrunk: the worst member's script
    shrunk = dataclasses.replace(
        failing("finite", "float32"),
        details={"minimal_case_id": "float32-L7-causal-nomask-s0"},
        repro="small",
    )
    members = [m for m in members if m.key != shrunk.key] + [shrunk]
    (group,) = group_failures(members)
    assert group.repro_result.key == shrunk.key  # the smaller case's script wins


def test_errors_are_named_as_errors():
    crash = [result("flash", c, "error", ratio=None, reason="SIGSEGV") for c in ("forward", "lse")]
    assert group_failures(crash)[0].summary() == "forward, lse error in float32"
    (mixed,) = group_failures([crash[0], result("flash", "lse", "fail", ratio=5.0)])
    assert mixed.summary() == "forward, lse fail or error in float32"
    assert mixed.worst.check == "lse"  # a member with measurements shows the worst tensor


def test_the_crash_is_shown_before_the_checks_it_kept_from_running():
    crash = dataclasses.replace(
        result("flash", "determinism", "error", ratio=None, reason="worker gw0 crashed twice: SIGSEGV"),
        repro="print(1)\n",
    )
    skipped = [
        dataclasses.replace(
            result("flash", c, "error", ratio=None, reason="not run: an earlier check of this case crashed"),
            repro="",
        )
        for c in ("shape_dtype", "no_mutation")  # before determinism in report order
    ]
    (group,) = group_failures([*skipped, crash])
    assert group.worst.check == "determinism" and group.repro_result.check == "determinism"

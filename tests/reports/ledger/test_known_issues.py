"""The ledger's format, its matching rules and its statuses, on synthetic records."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.judge.known_issues import LedgerError, ledger_status, load_ledger
from conformance.suite.check_registry import CHECKS
from kernels.registry import BUILTIN
from run_records.ledger_file import BUILTIN_LEDGER
from tests.support.ledgers import SUBJECTS, failing, load
from tests.support.report_folders import result

GOOD = """
[[issue]]
id = "nan-segments"
subject = "tpu_flash"
checks = ["forward", "finite"]
cases = ["*-seg*"]
features = ["segment_ids"]
input_kind = "nan_padding"
dtype = "float32"
jax = ">=0.4.35,<0.9"
link = "https://github.com/jax-ml/jax/issues/1"
summary = "NaN in masked keys reaches every row"
"""


def as_subject(record, subject):
    """``record`` (a tpu_flash one) as another subject's, its case id renamed to match."""
    case_id = subject + record.case.case_id[len("tpu_flash") :]
    return dataclasses.replace(
        record, case=dataclasses.replace(record.case, subject=subject, case_id=case_id)
    )


def test_the_builtin_ledger_is_valid_for_every_builtin_subject_and_check():
    ledger = load_ledger([BUILTIN_LEDGER], subjects=BUILTIN, checks=CHECKS)
    assert ledger.issues and all(i.link and i.summary for i in ledger.issues)


def test_an_entry_matches_only_failures_inside_every_part_of_its_selector(tmp_path):
    ledger = load(tmp_path, GOOD)
    assert ledger.apply(failing(), {"jax": "0.8.3"}).verdict == "known"
    assert ledger.apply(failing(verdict="error"), {"jax": "0.4.35"}).known_issue["id"] == "nan-segments"
    outside = [
        (failing(), "0.9.2"),  # version range
        (failing(), None),  # no JAX installed: a ranged entry cannot apply
        (failing(check="lse"), "0.8.3"),
        (failing(case_id="tpu_flash-float32-full-B1-Hq1-Hkv1-Sq256-Sk256-D64-nan_padding"), "0.8.3"),
        (failing(dtype="bfloat16"), "0.8.3"),
        (failing(input_kind="normal"), "0.8.3"),
        (failing(features=()), "0.8.3"),
        (failing(verdict="pass"), "0.8.3"),
        (failing(verdict="unsupported"), "0.8.3"),
    ]
    for record, version in outside:
        assert ledger.apply(record, {"jax": version}) is record


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[issue]\nid=", "not valid TOML"),
        (GOOD.replace('subject = "tpu_flash"', 'subject = "tpu_flsh"'), "unknown subject 'tpu_flsh'"),
        (GOOD.replace('["forward", "finite"]', '["forwards"]'), "unknown check(s) ['forwards']"),
        (GOOD.replace('">=0.4.35,<0.9"', '"0.4 to 0.9"'), "is not a PEP 440 specifier"),
        (GOOD + GOOD, "duplicates the id"),
        (GOOD.replace('link = "https://github.com/jax-ml/jax/issues/1"\n', ""), "missing link"),
        (GOOD.replace("dtype =", "dtypes ="), "unknown key(s) ['dtypes']"),
        (GOOD.replace('cases = ["*-seg*"]', 'cases = "*-seg*"'), "cases must be a list of strings"),
        ('title = "x"\n', "unknown top-level key(s) ['title']"),
        (
            GOOD.replace('dtype = "float32"', 'execution = "gpu"'),
            "execution = 'gpu'; write one of native, interpret",
        ),
        (
            GOOD.replace('dtype = "float32"', 'failure = "wrong"'),
            "failure = 'wrong'; write one of nan, numeric",
        ),
        (GOOD.replace('dtype = "float32"', 'tensors = ["o"]'), "unknown tensor(s) ['o']"),
    ],
)
def test_bad_ledger_input_is_one_line_naming_the_file_the_entry_and_the_fix(tmp_path, text, message):
    with pytest.raises(LedgerError) as raised:
        load(tmp_path, text)
    text = str(raised.value)
    assert message in text and "ledger.toml" in text and "\n" not in text
    if "entry" in text:
        assert "nan-segments" in text


def test_a_duplicate_id_across_files_names_both(tmp_path):
    (tmp_path / "a.toml").write_text(GOOD)
    (tmp_path / "b.toml").write_text(GOOD)
    with pytest.raises(LedgerError, match=r"b\.toml: entry 'nan-segments' duplicates .*a\.toml"):
        load_ledger([tmp_path / "a.toml", tmp_path / "b.toml"], subjects=SUBJECTS, checks=CHECKS)


def test_a_missing_ledger_file_names_the_fix(tmp_path):
    with pytest.raises(LedgerError, match="no such ledger file"):
        load_ledger([tmp_path / "nope.toml"], subjects=SUBJECTS, checks=CHECKS)


def test_statuses_reproduced_fixed_stale_not_run_and_out_of_range(tmp_path):
    ledger = load(tmp_path, GOOD)
    known = ledger.apply(failing(), {"jax": "0.8.3"})
    passing = failing(verdict="pass")
    unrelated = result("tpu_flash", case_id="tpu_flash-float32-full-B1-Hq1-Hkv1-Sq128-Sk128-D64")
    xla_only = result("xla", case_id="xla-float32-full-B1-Hq1-Hkv1-Sq128-Sk128-D64")

    def status(results, version="0.8.3", subjects=("tpu_flash",)):
        (entry,) = ledger_status(ledger, results, {"jax": version}, subjects)
        return entry

    assert status([known, unrelated])["status"] == "reproduced"
    assert status([known])["matched"] == [f"forward[{known.case.case_id}]"]
    assert status([passing, unrelated])["status"] == "no longer reproduces"
    assert status([unrelated])["status"] == "stale"
    assert status([xla_only], subjects=("xla",))["status"] == "not run here"
    out = status([failing()], version="0.9.2")
    assert out["status"] == "out of range" and out["failing_outside_range"] == 1


def test_the_matrix_shows_each_entry_by_version_and_flags_a_range_that_disagrees(tmp_path):
    from reports.matrix_report.version_matrix import (
        known_issue_rows,
        load_matrix,
        observed_rows,
        render_matrix,
    )
    from run_records.results_file import write_json_atomic
    from tests.support.report_folders import environment, standard_results, write_run

    def status(state, **extra):
        return {"id": "nan-segments", "jax": ">=0.9", "status": state, **extra}

    folders = []
    for version, state in (
        ("0.8.3", status("out of range", failing_outside_range=3)),
        ("0.9.2", status("reproduced")),
        ("0.10.2", status("no longer reproduces")),
    ):
        results = standard_results()
        results[0] = dataclasses.replace(results[0], observed={"fully_masked_out": "mean_v"})
        folder = write_run(tmp_path / f"jax-{version}", results, jax=version)
        summary = {"environment": environment(version), "known_issues": [state]}
        write_json_atomic(folder / "summary.json", summary)
        folders.append(folder)
    matrix = load_matrix(folders)
    (row,) = known_issue_rows(matrix)
    assert row[2:5] == ["⚠️ 🐞 outside range", "🐞", "✅ fixed"]
    assert row[5] == ("fails at 0.8.3, outside its range; passes at 0.10.2, inside its range")
    assert observed_rows(matrix) == [["flash", "fully_masked_out", "mean_v", "mean_v", "mean_v"]]
    text = render_matrix(matrix)
    assert "## Known issues by version" in text
    assert "## Observed behaviour where the semantics are open" in text


def test_a_reason_pattern_keeps_an_entry_to_its_own_error(tmp_path):
    with_reason = GOOD.replace('dtype = "float32"', 'dtype = "float32"\nreason = "DotThunk::Execute"')
    ledger = load(tmp_path, with_reason)
    compile_error = dataclasses.replace(
        failing(verdict="error"), reason="UNIMPLEMENTED: DotThunk::Execute: BF16"
    )
    other_error = dataclasses.replace(failing(verdict="error"), reason="ValueError: block sizes")
    assert ledger.apply(compile_error, {"jax": "0.8.3"}).verdict == "known"
    assert ledger.apply(other_error, {"jax": "0.8.3"}) is other_error
    # another error on its check: the entry's own could not have shown (masked), so it is not "fixed"
    (status,) = ledger_status(ledger, [other_error], {"jax": "0.8.3"}, ["tpu_flash"])
    assert status["status"] == "not run here" and status["masked"] == 1
    passing = failing(verdict="pass")
    (status,) = ledger_status(ledger, [other_error, passing], {"jax": "0.8.3"}, ["tpu_flash"])
    assert status["status"] == "no longer reproduces" and status["passing"] == 1
    with pytest.raises(LedgerError, match="reason is not a regular expression"):
        load(tmp_path, GOOD.replace('dtype = "float32"', 'dtype = "float32"\nreason = "(unclosed"'))


def test_a_failure_another_entry_explains_is_no_evidence_against_a_range(tmp_path):
    second = GOOD.replace('id = "nan-segments"', 'id = "older"').replace('">=0.4.35,<0.9"', '"<0.5"')
    ledger = load(tmp_path, GOOD + second)
    known = ledger.apply(failing(), {"jax": "0.8.3"})
    assert known.known_issue["id"] == "nan-segments"
    statuses = {s["id"]: s for s in ledger_status(ledger, [known], {"jax": "0.8.3"}, ["tpu_flash"])}
    assert statuses["older"]["status"] == "out of range" and statuses["older"]["failing_outside_range"] == 0


def test_an_entry_on_a_kernel_covers_its_interpreter_variants_and_not_other_subjects(tmp_path):
    ledger = load(tmp_path, GOOD)
    variant = "tpu_flash[interpreter=tpu]"

    assert ledger.apply(as_subject(failing(), variant), {"jax": "0.8.3"}).verdict == "known"
    assert ledger.apply(as_subject(failing(), "tpu_flash_v2"), {"jax": "0.8.3"}).verdict == "fail"
    statuses = ledger_status(ledger, [as_subject(failing(), variant)], {"jax": "0.8.3"}, [variant])
    assert statuses[0]["status"] == "reproduced"


def test_an_entry_on_a_variant_covers_only_that_variant(tmp_path):
    # TPU interpret mode's own defect: the generic-interpreter runs of the kernel must not match
    # it, nor call it "no longer reproduces" when they pass.
    ledger = load(tmp_path, GOOD.replace('subject = "tpu_flash"', 'subject = "tpu_flash[interpreter=tpu]"'))
    variant = "tpu_flash[interpreter=tpu]"

    assert ledger.apply(as_subject(failing(), variant), {"jax": "0.8.3"}).verdict == "known"
    assert ledger.apply(failing(), {"jax": "0.8.3"}).verdict == "fail"
    passing = dataclasses.replace(failing(), verdict="pass")
    assert ledger_status(ledger, [passing], {"jax": "0.8.3"}, ["tpu_flash"])[0]["status"] == "not run here"
    with pytest.raises(LedgerError, match=r"unknown subject 'flash\[interpreter=tpu\]'.*NAME\[key=value\]"):
        load(tmp_path, GOOD.replace('subject = "tpu_flash"', 'subject = "flash[interpreter=tpu]"'))


def test_an_entry_is_not_stale_when_the_user_narrowed_the_run(tmp_path):
    # `-k recompile` leaves the entry's checks out: that is not a typo in its selector.
    ledger = load(tmp_path, GOOD)
    other = dataclasses.replace(failing(check="recompile"), verdict="pass")
    assert ledger_status(ledger, [other], {"jax": "0.8.3"}, ["tpu_flash"])[0]["status"] == "stale"
    assert (
        ledger_status(ledger, [other], {"jax": "0.8.3"}, ["tpu_flash"], narrowed=True)[0]["status"]
        == "not run here"
    )


def test_an_entry_for_the_compiled_kernel_explains_native_failures_only(tmp_path):
    """A defect seen only on the hardware: the interpreter's failures are not it, and an
    interpreted run that passes says nothing about it (not run here, never 'fixed')."""
    ledger = load(tmp_path, GOOD.replace('dtype = "float32"', 'dtype = "float32"\nexecution = "native"'))

    def ran(record, execution):
        return dataclasses.replace(record, availability={"available": True, "execution": execution})

    native, interpreted = ran(failing(), "native"), ran(failing(), "interpret")
    assert ledger.apply(native, {"jax": "0.8.3"}).verdict == "known"
    assert ledger.apply(interpreted, {"jax": "0.8.3"}).verdict == "fail"
    passing_in_interpreter = ran(failing(verdict="pass"), "interpret")
    (entry,) = ledger_status(ledger, [passing_in_interpreter], {"jax": "0.8.3"}, ["tpu_flash"])
    assert entry["status"] == "not run here"
    (entry,) = ledger_status(
        ledger, [ran(failing(verdict="pass"), "native")], {"jax": "0.8.3"}, ["tpu_flash"]
    )
    assert entry["status"] == "no longer reproduces"


def test_every_builtin_entry_records_its_release_sweep_and_its_range_agrees():
    """A range bounded by the matrix's versions is wrong for a user between them (0.7.1 failed
    like 0.7.2 while the entry said ==0.7.2): each built-in entry records the releases it was
    swept over, and its range must hold exactly the ones it reproduced at."""
    from reports.ledger.release_sweep import range_problem

    ledger = load_ledger([BUILTIN_LEDGER], subjects=BUILTIN, checks=CHECKS)
    problems = [range_problem(i.id, i.jax, i.bisection, i.tokamax) for i in ledger.issues]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)


def test_a_range_that_leaves_out_a_reproducing_release_or_holds_a_clean_one_is_named():
    from reports.ledger.release_sweep import range_problem

    sweep = {"span": ["0.7.0", "0.8.0"], "reproduces": ["0.7.1", "0.7.2"], "clean": ["0.7.0", "0.8.0"]}
    assert range_problem("x", ">=0.7.1,<0.8.0", sweep) is None
    assert "reproduces outside it at ['0.7.1']" in range_problem("x", "==0.7.2", sweep)
    assert "clean inside it at ['0.8.0']" in range_problem("x", ">=0.7.1", sweep)
    assert "no recorded sweep" in range_problem("x", ">=0.7.1", None)
    assert range_problem("x", ">=0.11.2", {"not_observable": "native GPU only"}) is None
    assert "not releases inside the span" in range_problem("x", "", {**sweep, "reproduces": ["0.9.0"]})


def test_the_sweep_reads_each_release_status_including_failures_outside_the_range(tmp_path):
    import json

    from reports.ledger.release_sweep import reproducing, suggested_range

    statuses = {
        "0.7.0": {"status": "out of range", "failing_outside_range": 0, "ran_outside_range": 4},
        "0.7.1": {"status": "out of range", "failing_outside_range": 18, "ran_outside_range": 18},
        "0.7.2": {"status": "reproduced"},
        "0.8.0": {"status": "no longer reproduces"},
        "0.8.1": {"status": "not run here"},
    }
    folders = []
    for version, status in statuses.items():
        folder = tmp_path / version
        folder.mkdir()
        summary = {"environment": {"libraries": {"jax": version}}, "known_issues": [{"id": "e", **status}]}
        (folder / "summary.json").write_text(json.dumps(summary))
        folders.append(folder)
    seen = reproducing(reversed(folders))["e"]
    assert [(o.version, o.state) for o in seen] == [
        ("0.7.0", "clean"),
        ("0.7.1", "reproduced"),
        ("0.7.2", "reproduced"),
        ("0.8.0", "clean"),
        ("0.8.1", "unobserved"),
    ]
    assert suggested_range(seen) == ">=0.7.1,<0.8.0"


def _failing_tensor(tensor: str, max_abs: float):
    """A failing forward record whose one tensor out of tolerance is ``tensor``, off by ``max_abs``."""
    record = failing()
    bad = dataclasses.replace(record.metrics[0], tensor=tensor, max_abs=max_abs, passed=False)
    return dataclasses.replace(record, metrics=(bad,))


def test_a_failure_inside_the_selector_with_another_signature_stays_unexplained(tmp_path):
    # The entry describes NaN in out; the same cases failing by a finite error, or in lse, are
    # another defect: they must stay red, not be filed under it.
    ledger = load(tmp_path, GOOD.replace('dtype = "float32"', 'tensors = ["out"]\nfailure = "nan"'))
    versions = {"jax": "0.8.3"}
    assert ledger.apply(_failing_tensor("out", float("inf")), versions).verdict == "known"
    for other in (_failing_tensor("out", 0.5), _failing_tensor("lse", float("inf"))):
        assert ledger.apply(other, versions).verdict == "fail"
    # No judged tensor (an error, a non-numeric check): the selector and reason decide.
    assert ledger.apply(failing(verdict="error"), versions).verdict == "known"
    numeric = load(tmp_path, GOOD.replace('dtype = "float32"', 'failure = "numeric"'), "numeric.toml")
    assert numeric.apply(_failing_tensor("out", 0.5), versions).verdict == "known"
    assert numeric.apply(_failing_tensor("out", float("inf")), versions).verdict == "fail"


def test_an_entry_for_one_failing_part_never_explains_a_record_where_another_fails_too(tmp_path):
    """``details``: numbers the record must hold. An api_contract entry for its float16 default
    (``parts_fail = 1``) explains that part failing alone, not beside a failing key split."""
    ledger = load(tmp_path, GOOD.replace('dtype = "float32"', "details = { parts_fail = 1 }"))
    versions = {"jax": "0.8.3"}
    alone = dataclasses.replace(failing(), details={"parts_fail": 1.0, "parts_pass": 7.0})
    assert ledger.apply(alone, versions).verdict == "known"
    beside = dataclasses.replace(alone, details={"parts_fail": 2.0, "parts_pass": 6.0})
    assert ledger.apply(beside, versions).verdict == "fail"
    with pytest.raises(LedgerError, match="details must be a table of numbers"):
        load(tmp_path, GOOD.replace('dtype = "float32"', 'details = { parts_fail = "one" }'), "bad.toml")


def test_an_entry_with_variants_false_covers_its_own_name_only(tmp_path):
    # A defect of the adapter's default configuration (tokamax_ring's use_base2_exp): the variant
    # that changes the configuration must stay judged, and its passing runs say nothing of the entry.
    ledger = load(tmp_path, GOOD.replace('summary = "', 'variants = false\nsummary = "'))
    variant = "tpu_flash[interpreter=tpu]"

    assert ledger.apply(failing(), {"jax": "0.8.3"}).verdict == "known"
    assert ledger.apply(as_subject(failing(), variant), {"jax": "0.8.3"}).verdict == "fail"
    passing = dataclasses.replace(as_subject(failing(), variant), verdict="pass")
    assert ledger_status(ledger, [passing], {"jax": "0.8.3"}, [variant])[0]["status"] == "not run here"
    with pytest.raises(LedgerError, match="variants must be true or false"):
        load(tmp_path, GOOD.replace('summary = "', 'variants = "no"\nsummary = "'))

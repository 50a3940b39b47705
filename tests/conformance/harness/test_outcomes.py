"""How a check's verdict becomes pytest's outcome (``plugin.Bound.check``): the outcome pytest
reports, with the reason as its message, and nothing pytest would spend time formatting."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from conformance.harness import recording
from conformance.harness.plugin import Bound
from conformance.judge.runner import case_description
from conformance.plan import catalogue
from conformance.plan.cases import Case
from run_records.results_file import CaseResult

ISSUE = {"id": "wrong-scale", "link": "https://github.com/example/kernels/issues/1", "summary": "scale twice"}


def _bound(verdict: str, **fields) -> tuple[Bound, catalogue.Planned]:
    planned = catalogue.Planned("forward", Case("s", "float32"), "run")
    result = CaseResult(case=case_description(planned.case), check="forward", verdict=verdict, **fields)
    plugin = types.SimpleNamespace(
        runner=types.SimpleNamespace(evaluate=lambda _: result),
        classify_known=lambda r: r,
        report_dir=Path("reports"),
    )
    return Bound(plugin, types.SimpleNamespace(user_properties=[])), planned  # type: ignore[arg-type]


def test_a_known_result_is_an_xfail_whose_message_is_the_issue_and_carries_no_traceback():
    # pytest formats an xfail raised with a traceback like a failure, parsing every frame's source
    # file (60 ms each, 2.8% of a worker at --impl all), before it reads the outcome as xfailed.
    bound, planned = _bound("known", reason="out differs", known_issue=ISSUE)
    with pytest.raises(pytest.xfail.Exception) as raised:
        bound.check(planned)
    assert raised.value.pytrace is False
    assert raised.value.msg == f"known issue wrong-scale ({ISSUE['link']}): scale twice"


@pytest.mark.parametrize("verdict", ["fail", "error"])
def test_a_failure_names_check_and_case_and_carries_no_traceback(verdict):
    bound, planned = _bound(verdict, reason="out differs")
    with pytest.raises(pytest.fail.Exception) as raised:
        bound.check(planned)
    assert raised.value.pytrace is False
    assert raised.value.msg.startswith(f"forward {verdict.upper()}: ") and "out differs" in raised.value.msg


def test_an_unsupported_result_is_a_skip_with_its_reason():
    bound, planned = _bound("unsupported", reason="no lse exposed")
    with pytest.raises(pytest.skip.Exception) as raised:
        bound.check(planned)
    assert raised.value.msg == "unsupported: no lse exposed"


def test_a_pass_raises_nothing_and_attaches_case_then_record():
    bound, planned = _bound("pass")
    bound.check(planned)
    names = [name for name, _ in bound.node.user_properties]
    assert names == [recording.CASE_PROPERTY, recording.RESULT_PROPERTY]

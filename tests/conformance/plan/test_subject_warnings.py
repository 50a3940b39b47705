"""Warnings a subject raises: caught once each whatever the filters, passed on, and kept with the
subject when resolving it (importing a plug-in's module) raises them."""

from __future__ import annotations

import warnings

import pytest

from conformance.plan import subject_warnings
from conformance.plan.subjects import resolve_subjects


def _warn_twice_each() -> None:
    for _ in range(2):
        warnings.warn("old API;\n  use the new one", DeprecationWarning, stacklevel=1)
        warnings.warn("default will change", FutureWarning, stacklevel=1)


def test_each_distinct_warning_is_caught_once_on_one_line_and_passed_on_once():
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("ignore")  # as Python's defaults do to a library's DeprecationWarning
        warnings.simplefilter("always", FutureWarning)
        with subject_warnings.capturing(caught):
            _warn_twice_each()
    assert caught == ["DeprecationWarning: old API; use the new one", "FutureWarning: default will change"]
    assert [str(w.message) for w in outside] == ["default will change"]  # the outer filters still decide


def test_a_call_that_raises_keeps_what_it_caught_and_passes_nothing_on():
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        with pytest.raises(ValueError), subject_warnings.capturing(caught):
            warnings.warn("before the failure", UserWarning, stacklevel=1)
            raise ValueError("the call's own error")
    assert caught == ["UserWarning: before the failure"] and outside == []


def test_an_error_filter_still_turns_the_warning_into_an_exception_after_it_is_recorded():
    caught: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(DeprecationWarning, match="old API"), subject_warnings.capturing(caught):
            _warn_twice_each()
    assert caught[0] == "DeprecationWarning: old API; use the new one"


def test_importing_a_plug_in_module_that_warns_counts_as_its_subjects_warning(tmp_path, monkeypatch):
    (tmp_path / "warns_on_import_plugin.py").write_text(
        "import warnings\n"
        "from tests.support.toy_subjects import CAPS, exact\n"
        "warnings.warn('this plug-in moved; use another', DeprecationWarning, stacklevel=2)\n"
        "def attention(q, k, v, **keywords):\n"
        "    return exact(q, k, v, **keywords)\n"
        "attention.attention_capabilities = CAPS\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # passed on by the capture: not this test's concern
        (subject,) = resolve_subjects("warns_on_import_plugin:attention")
    assert subject.warnings == ("DeprecationWarning: this plug-in moved; use another",)
    assert resolve_subjects("tests.support.toy_subjects:exact")[0].warnings == ()

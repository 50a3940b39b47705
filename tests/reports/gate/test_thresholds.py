"""The gate's thresholds are declared once (reports/gate/thresholds.py): every declared threshold
is a field of ``Thresholds`` with its default and a ``python -m reports gate`` option that sets it."""

from __future__ import annotations

import dataclasses
import re

import pytest

from reports.__main__ import parser
from reports.gate.thresholds import THRESHOLDS, Thresholds, thresholds_from_args


def _gate_args(*options: str):
    return parser().parse_args(["gate", "base", "candidate", *options])


def test_defaults_come_from_the_declaration():
    fields = {f.name: f.default for f in dataclasses.fields(Thresholds)}
    assert fields == {t.name: t.default for t in THRESHOLDS}
    assert thresholds_from_args(_gate_args()) == Thresholds()


@pytest.mark.parametrize("threshold", [t for t in THRESHOLDS if not t.is_flag], ids=lambda t: t.name)
def test_each_option_sets_its_threshold(threshold):
    # 0.6 is legal for every numeric threshold (a fraction, a confidence); counts take 7
    text, value = ("7", 7) if isinstance(threshold.default, int) else ("60%", 0.6)
    thresholds = thresholds_from_args(_gate_args(threshold.option, text))
    assert getattr(thresholds, threshold.name) == value
    others = {t.name for t in THRESHOLDS} - {threshold.name}
    assert all(getattr(thresholds, name) == getattr(Thresholds(), name) for name in others)


@pytest.mark.parametrize("threshold", [t for t in THRESHOLDS if t.is_flag], ids=lambda t: t.name)
def test_each_flag_sets_its_threshold(threshold):
    assert getattr(thresholds_from_args(_gate_args(threshold.option)), threshold.name) is True


def test_a_value_out_of_range_names_the_threshold_and_what_it_accepts():
    for threshold in THRESHOLDS:
        if threshold.is_flag:
            continue
        with pytest.raises(
            ValueError, match=re.escape(f"threshold {threshold.name} must be {threshold.requirement}")
        ):
            Thresholds(**{threshold.name: -1})

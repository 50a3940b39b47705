"""The gate's thresholds, each declared once: its default, its meaning, how the command line
reads it and what values it accepts. ``Thresholds`` (the values one gate runs with) and the
``python -m reports gate`` options are both built from ``THRESHOLDS``, so a new threshold is
one entry here.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from typing import Any


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def fraction(text: str) -> float:
    """A threshold on the command line: '0.25' or '25%'."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (write 0.25 or 25%)") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def count(text: str) -> int:
    """A whole number >= 1 on the command line."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _finite_non_negative(value: object) -> bool:
    return _is_number(value) and math.isfinite(value) and value >= 0


def _confidence(value: object) -> bool:
    # 0.5 judges the plain sample median; 1 would need infinitely many cases.
    return _is_number(value) and 0.5 <= value < 1


def _whole_at_least_one(value: object) -> bool:
    return _is_number(value) and value == int(value) and value >= 1


@dataclasses.dataclass(frozen=True)
class Threshold:
    """One threshold: ``--name-with-dashes`` on the command line, ``name`` on ``Thresholds``.

    A flag (a ``bool`` default) is a ``store_true`` option and needs no check; any other
    threshold is read by ``parse`` and must satisfy ``accepts``, described by ``requirement``.
    """

    name: str
    default: float | int | bool
    help: str
    parse: Callable[[str], Any] | None = None
    accepts: Callable[[object], bool] | None = None
    requirement: str = ""

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def is_flag(self) -> bool:
        return isinstance(self.default, bool)


def _number(name: str, default: float, help: str) -> Threshold:
    return Threshold(name, default, help, fraction, _finite_non_negative, "a finite number >= 0")


THRESHOLDS: tuple[Threshold, ...] = (
    # Systematic drift: the median per-case change of a group's ratios is above +50% ...
    _number(
        "ratio_drift",
        0.5,
        "systematic drift: the median per-case growth of a group's error ratios "
        "(subject x dtype x tensor x max/mean, checks both pass) that fails the gate "
        "(default %(default)s = +50%%)",
    ),
    # ... at this confidence (a distribution-free sign-test bound on that median, so a group
    # of noisy cases does not fail by chance) ...
    Threshold(
        "drift_confidence",
        0.95,
        "confidence that a group's median change exceeds --ratio-drift (a sign-test bound, "
        "so noise in a few cases does not fail the gate; default %(default)s)",
        fraction,
        _confidence,
        "a number in [0.5, 1)",
    ),
    # ... over at least this many cases passing in both; smaller groups are left to the
    # single-case rule (at 95% the bound needs 5 cases anyway: 0.5**5 < 5%).
    Threshold(
        "drift_min_cases",
        5,
        "smallest group the systematic rule judges (default %(default)s)",
        count,
        _whole_at_least_one,
        "a whole number >= 1",
    ),
    # A single case fails the gate when its error rises above this share of its tolerance ...
    _number(
        "near_tolerance",
        0.7,
        "a single case fails when its error rises above this share of its tolerance ... "
        "(default %(default)s)",
    ),
    # ... from below this share: it was far from failing and now nearly fails.
    _number("well_below", 0.25, "... from below this share in the base (default %(default)s)"),
    # Median time per call up by more than 25% (shared CI machines are noisy).
    _number(
        "max_slowdown",
        0.25,
        "relative growth of a benchmark's median time that fails the gate (default %(default)s)",
    ),
    # Peak memory up by more than 10%.
    _number(
        "max_memory_growth",
        0.10,
        "relative growth of a benchmark's peak memory that fails the gate (default %(default)s)",
    ),
    Threshold(
        "allow_incomplete",
        False,
        "judge an incomplete (killed) run on the checks it recorded instead of failing it",
    ),
    # What a subject does where the semantics are open (CaseResult.observed) changed: fails the
    # gate unless allowed, since downstream code depends on what a kernel really does.
    Threshold(
        "allow_behaviour_change",
        False,
        "list a change of observed behaviour where the semantics are open (e.g. what a fully "
        "masked row returns) as a note instead of failing the gate",
    ),
)


def _validate(thresholds: Any) -> None:
    for threshold in THRESHOLDS:
        value = getattr(thresholds, threshold.name)
        if threshold.accepts is not None and not threshold.accepts(value):
            raise ValueError(f"threshold {threshold.name} must be {threshold.requirement}, got {value!r}")
    if thresholds.well_below > thresholds.near_tolerance:
        raise ValueError(
            f"threshold well_below ({thresholds.well_below:g}) must not exceed near_tolerance "
            f"({thresholds.near_tolerance:g}): a case must come from further below its tolerance "
            "than it ends up"
        )


def _summary_line(thresholds: Any) -> str:
    """The thresholds in force, in words, for the foot of the verdict."""
    t = thresholds
    return (
        f"ratio drift: a group's median case > +{t.ratio_drift:.0%} "
        f"at {t.drift_confidence:.0%} confidence (groups of ≥ {t.drift_min_cases:g} cases) · "
        f"one case: from < {t.well_below:.0%} to > {t.near_tolerance:.0%} of its tolerance, "
        "or non-finite · "
        f"slowdown > {t.max_slowdown:.0%} · peak memory > +{t.max_memory_growth:.0%} · "
        f"incomplete runs {'allowed' if t.allow_incomplete else 'fail the gate'} · "
        f"behaviour changes {'allowed' if t.allow_behaviour_change else 'fail the gate'}"
    )


# The values one gate runs with: a frozen dataclass with one field per declared threshold,
# validated on construction (ValueError naming the threshold and what it accepts).
Thresholds = dataclasses.make_dataclass(
    "Thresholds",
    [(t.name, type(t.default), dataclasses.field(default=t.default)) for t in THRESHOLDS],
    namespace={"__post_init__": _validate, "summary_line": _summary_line, "__module__": __name__},
    frozen=True,
)


def add_threshold_options(parser: argparse.ArgumentParser) -> None:
    """One command-line option per declared threshold, with its default."""
    for threshold in THRESHOLDS:
        if threshold.is_flag:
            parser.add_argument(threshold.option, action="store_true", help=threshold.help)
        else:
            parser.add_argument(
                threshold.option, type=threshold.parse, default=threshold.default, help=threshold.help
            )


def thresholds_from_args(args: argparse.Namespace) -> Any:
    """The ``Thresholds`` a parsed command line asks for (ValueError when they contradict)."""
    return Thresholds(**{t.name: getattr(args, t.name) for t in THRESHOLDS})

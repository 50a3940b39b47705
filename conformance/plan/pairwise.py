"""Pairwise coverage of a subject's optional inputs.

Defects hide in combinations: kv lengths with a window, a bias with GQA, a sink with segment
ids. For every pair of optional features a subject declares (``FEATURES``), each of the four
present/absent combinations should appear in at least one case that runs. ``covering_cases``
adds the fewest cases it can find (a greedy covering array, each case checked against the
declaration) to a plan that misses some, and ``coverage`` reports what is covered, what the
declaration rules out (with its reason), and what is left.

Pure functions of (subject, capabilities, cases): the catalogue calls them with a predicate
that says whether a case runs, so this module knows nothing of checks.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Sequence

from conformance.plan import edge_matrix
from conformance.plan.cases import Case
from kernels.contract import features as feature_table
from kernels.contract.base import Capabilities

# A combination: (feature, present?, feature, present?), the first name sorting first.
Combo = tuple[str, bool, str, bool]
# Why a case cannot run (the declaration's reason), or None when it runs.
RunsCheck = Callable[[Case], str | None]

# The case covering cases start from: small, square, no optional input.
BASE = Case("", "float32", batch=2, q_heads=2, kv_heads=2, q_len=128, kv_len=128, head_dim=64, v_head_dim=64)
# At most this many cases are added per subject: a pairwise covering array of ten binary
# features needs 6 to 8; the rest stay listed as uncovered.
MAX_ADDED = 12


@dataclasses.dataclass(frozen=True)
class OptionalFeature:
    """An optional input: whether a subject declares it, whether a case has it, and how to
    give a case it or take it away."""

    name: str
    declared: Callable[[Capabilities], bool]
    present: Callable[[Case], bool]
    add: Callable[[Case, Capabilities], Case]
    remove: Callable[[Case], Case]
    needs: tuple[str, ...] = ()  # present only with these (a bias fill needs a bias)


def _from_table(edit: feature_table.PairwiseEdit) -> OptionalFeature:
    """A feature table's present/absent edit (``kernels/contract/features.py``) as case -> case."""
    return OptionalFeature(
        edit.name,
        edit.declared,
        edit.present,
        lambda case, caps: dataclasses.replace(case, **edit.add(case, caps)),
        lambda case: dataclasses.replace(case, **edit.remove(case)),
        edit.needs,
    )


def _config(case: Case, caps: Capabilities) -> Case:
    configs = edge_matrix.edge_configs(caps.tunables, case.q_len, case.kv_len, case.batch)
    return dataclasses.replace(case, config=configs[0][1]) if configs else case


def _has_config(caps: Capabilities) -> bool:
    return bool(caps.tunables) and bool(edge_matrix.edge_configs(caps.tunables, 128, 128, 2))


# The table's edits, then the tunables' (a config is a core field of a case, not a feature).
FEATURES: tuple[OptionalFeature, ...] = (
    *(_from_table(edit) for edit in feature_table.pairwise_edits()),
    OptionalFeature(
        "config", _has_config, lambda k: bool(k.config), _config, lambda k: dataclasses.replace(k, config=())
    ),
)
BY_NAME = {f.name: f for f in FEATURES}


def declared_features(caps: Capabilities) -> tuple[OptionalFeature, ...]:
    return tuple(f for f in FEATURES if f.declared(caps))


def all_combos(features: Sequence[OptionalFeature]) -> tuple[Combo, ...]:
    names = sorted(f.name for f in features)
    return tuple(
        (a, x, b, y)
        for a, b in itertools.combinations(names, 2)
        for x in (True, False)
        for y in (True, False)
    )


def combos_of(case: Case, features: Sequence[OptionalFeature]) -> set[Combo]:
    """Every combination ``case`` holds."""
    present = {f.name: f.present(case) for f in features}
    names = sorted(present)
    return {(a, present[a], b, present[b]) for a, b in itertools.combinations(names, 2)}


@dataclasses.dataclass(frozen=True)
class PairCoverage:
    """One subject's pairwise coverage over the cases that run."""

    subject: str
    features: tuple[str, ...]
    covered: int
    excluded: dict[Combo, str]  # combinations the declaration rules out, with its reason
    uncovered: tuple[Combo, ...]

    @property
    def total(self) -> int:
        n = len(self.features)
        return 4 * n * (n - 1) // 2

    def as_record(self) -> dict[str, object]:
        """What summary.json keeps (reports/run_report/pairwise_table.py renders it)."""
        return {
            "features": list(self.features),
            "combinations": self.total,
            "covered": self.covered,
            "excluded": [{"combination": describe(c), "reason": r} for c, r in self.excluded.items()],
            "uncovered": [describe(c) for c in self.uncovered],
        }


def describe(combo: Combo) -> str:
    """``("bias", True, "gqa", False)`` -> ``"bias + no gqa"``."""
    a, x, b, y = combo
    return f"{'' if x else 'no '}{a} + {'' if y else 'no '}{b}"


def _with(case: Case, assignment: dict[str, bool], caps: Capabilities) -> Case:
    for name, on in assignment.items():
        feature = BY_NAME[name]
        case = feature.add(case, caps) if on else feature.remove(case)
    return case


def _seed_case(
    subject: str, caps: Capabilities, dtype: str, runnable: Sequence[Case], runs: RunsCheck
) -> Case:
    """What new cases start from: ``BASE`` where the subject runs it; otherwise the plainest
    case it runs (a decode kernel's Sq=1 case, an always-causal kernel's causal one), in
    ``dtype`` with every optional input taken away where it still runs so."""
    base = dataclasses.replace(BASE, subject=subject, dtype=dtype, **feature_table.subject_fields(caps))
    if runs(base) is None or not runnable:
        return base
    features = declared_features(caps)
    plainest = min(
        (c for c in runnable if c.dtype == dtype and c.input_kind == "normal" and not c.config),
        # fewest optional inputs, then lengths nearest BASE's (a window or lengths need room)
        key=lambda c: (
            sum(f.present(c) for f in features),
            abs(c.q_len - BASE.q_len) + abs(c.kv_len - BASE.kv_len),
        ),
        default=runnable[0],
    )
    for feature in features:
        stripped = feature.remove(plainest)
        if runs(stripped) is None:
            plainest = stripped
    return plainest


def covering_cases(
    subject: str, caps: Capabilities, dtype: str, runnable: Iterable[Case], runs: RunsCheck
) -> tuple[tuple[Case, ...], dict[Combo, str]]:
    """Cases that cover the combinations ``runnable`` misses, greedily: each new case starts
    from one missing combination and sets every other feature the way that covers the most
    still-missing ones, keeping only settings the declaration runs. Returns (cases,
    combinations the declaration rules out with the reason)."""
    features = declared_features(caps)
    runnable = list(runnable)
    missing = set(all_combos(features)) - set().union(*(combos_of(c, features) for c in runnable))
    excluded: dict[Combo, str] = {}
    added: list[Case] = []
    base = _seed_case(subject, caps, dtype, runnable, runs)
    for combo in sorted(missing):
        if len(added) >= MAX_ADDED:
            break
        if combo not in missing:
            continue
        a, x, b, y = combo
        if (x and not y and b in BY_NAME[a].needs) or (y and not x and a in BY_NAME[b].needs):
            present, absent = (a, b) if x else (b, a)
            excluded[combo] = f"{present} needs {absent}: no case has one without the other"
            missing.discard(combo)
            continue
        assignment = {f.name: False for f in features} | {a: x, b: y}
        case = _with(base, assignment, caps)
        reason = runs(case)
        for feature in features:  # a subject may need another feature on (paged: kv lengths)
            if reason is None:
                break
            if feature.name not in (a, b):
                trial = _with(case, {feature.name: True}, caps)
                if runs(trial) is None:
                    case, reason = trial, None
        if reason is not None:
            excluded[combo] = reason
            missing.discard(combo)
            continue
        for feature in features:
            if feature.name in (a, b):
                continue
            options = []
            for on in (True, False):
                trial = _with(case, {feature.name: on}, caps)
                gain = len(combos_of(trial, features) & missing)
                options.append((gain, on, trial))
            for _, _, trial in sorted(options, key=lambda o: (-o[0], not o[1])):
                # An edit that brings what it needs (a bias fill, its bias) must not undo the combination.
                if combo in combos_of(trial, features) and runs(trial) is None:
                    case = trial
                    break
        added.append(case)
        missing -= combos_of(case, features)
    return tuple(added), excluded


def coverage(
    subject: str, caps: Capabilities, runnable: Iterable[Case], excluded: dict[Combo, str]
) -> PairCoverage:
    """What ``runnable`` (the cases that run) covers of the declared features' combinations."""
    features = declared_features(caps)
    combos = all_combos(features)
    seen = set().union(*(combos_of(c, features) for c in runnable))
    covered = sum(1 for c in combos if c in seen)
    ruled_out = {c: r for c, r in excluded.items() if c not in seen}
    left = tuple(c for c in combos if c not in seen and c not in ruled_out)
    return PairCoverage(subject, tuple(sorted(f.name for f in features)), covered, ruled_out, left)


def report(
    subject: str, caps: Capabilities, dtype: str, cases: Iterable[Case], runs: RunsCheck
) -> PairCoverage:
    """The coverage of a finished plan: what its runnable cases cover, what the declaration
    rules out, and what is left (what ``covering_cases`` could not add within MAX_ADDED)."""
    runnable = [c for c in cases if runs(c) is None]
    _, excluded = covering_cases(subject, caps, dtype, runnable, runs)
    return coverage(subject, caps, runnable, excluded)

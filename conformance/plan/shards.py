"""``--shard K/N``: a deterministic slice of the catalogue, balanced by estimated cost.

Pure functions of the plan (itself a pure function of subjects, profile, seed and the
JAX version the subjects declare under), so every machine given the same options takes
the same slice, and the N slices are disjoint and together hold the whole plan.

The unit of assignment is one case id (subject + dtype + shape + semantics): every check
of a case lands on the same shard, so they share the case's ``SubjectRun`` and float64
``Oracle`` (``conformance/judge/artifacts.py``). Dropping the dtype from the unit would
buy nothing: the dtype is part of ``Case.semantic_id``, which seeds the inputs, so two
dtypes of one template draw different inputs and get different references anyway; it
would only make the units coarser and the shards less even. Grouping across subjects (by
semantic id) would not pay either: items run subject by subject, so a reference shared
across subjects rarely survives the artifact store's small LRU.

Units are assigned greedily, longest estimated cost first (ties by case id), each to the
currently cheapest shard (ties by shard number): LPT scheduling, within 4/3 of optimal.
The placeholders of unavailable subjects cost nothing and go to shard 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from conformance.plan.catalogue import Planned

SHARD_SYNTAX = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# Interpreted kernels (Pallas interpret mode) run the kernel body op by op in Python: measured
# at one to two orders of magnitude slower per flop than a native kernel on the same host.
EXECUTION_FACTOR = {"native": 1.0, "interpret": 30.0}
# Fixed cost of one check item (dispatch, tracing, metrics) in flops-equivalents, so a suite of
# tiny cases is not estimated as free; ~ the cost of a 1x1x128x128x64 case.
ITEM_OVERHEAD_FLOPS = 1 << 22
# Checks that do not call the subject (``unsupported``) cost about nothing, only their record.
STATUS_WEIGHT = {"run": 1.0, "raises": 0.5, "unsupported": 0.01, "unavailable": 0.0}


class ShardSyntaxError(ValueError):
    """A ``--shard`` value that is not ``K/N`` with 1 <= K <= N; the message names the fix."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/3"`` -> (2, 3); anything else raises ShardSyntaxError with one line naming the fix."""
    match = SHARD_SYNTAX.match(text or "")
    if match is None:
        raise ShardSyntaxError(f"--shard {text!r}: write K/N, e.g. --shard 1/4 (shard K of N, 1 <= K <= N)")
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise ShardSyntaxError(
            f"--shard {text}: K must be between 1 and N (got K={index}, N={count}); "
            f"e.g. --shard 1/{max(count, 1)}"
        )
    return index, count


def unit_of(item: Planned) -> str:
    """The assignment unit: the case id (see the module docstring)."""
    return item.case.case_id


def unit_costs(plan: Mapping[str, tuple[Planned, ...]], execution: Mapping[str, str]) -> dict[str, float]:
    """Estimated cost per unit: sum over its items of (flops + overhead) x status weight x the
    subject's execution factor (``execution``: subject name -> "native" | "interpret")."""
    costs: dict[str, float] = {}
    for items in plan.values():
        for item in items:
            factor = EXECUTION_FACTOR.get(execution.get(item.case.subject, "native"), 1.0)
            weight = STATUS_WEIGHT.get(item.status, 1.0)
            flops = 0 if item.status == "unavailable" else item.case.shape.flops
            cost = (flops + ITEM_OVERHEAD_FLOPS) * weight * factor
            costs[unit_of(item)] = costs.get(unit_of(item), 0.0) + cost
    return costs


def assign(
    plan: Mapping[str, tuple[Planned, ...]], execution: Mapping[str, str], count: int
) -> dict[str, int]:
    """Unit -> shard number (1-based) for every unit of the plan."""
    unavailable = {unit_of(i) for items in plan.values() for i in items if i.status == "unavailable"}
    costs = unit_costs(plan, execution)
    loads = [0.0] * count
    shard_of = {unit: 1 for unit in unavailable}
    for unit in sorted(costs, key=lambda u: (-costs[u], u)):
        if unit in shard_of:
            continue
        cheapest = min(range(count), key=lambda s: (loads[s], s))
        loads[cheapest] += costs[unit]
        shard_of[unit] = cheapest + 1
    return shard_of


def shard_loads(
    plan: Mapping[str, tuple[Planned, ...]], execution: Mapping[str, str], count: int
) -> list[float]:
    """Estimated cost of each shard (index 0 is shard 1), for tests and diagnostics."""
    costs, shard_of = unit_costs(plan, execution), assign(plan, execution, count)
    loads = [0.0] * count
    for unit, cost in costs.items():
        loads[shard_of[unit] - 1] += cost
    return loads


def take_shard(
    plan: Mapping[str, tuple[Planned, ...]], execution: Mapping[str, str], index: int, count: int
) -> dict[str, tuple[Planned, ...]]:
    """The plan restricted to shard ``index`` of ``count`` (catalogue order kept within a check)."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index} of {count}: need 1 <= index <= count")
    shard_of = assign(plan, execution, count)
    return {check: tuple(i for i in items if shard_of[unit_of(i)] == index) for check, items in plan.items()}

"""--shard K/N: deterministic, complete, disjoint, whole cases, balanced by estimated cost."""

from __future__ import annotations

import pytest

from conformance.plan import profiles, shards
from conformance.plan.catalogue import plan
from conformance.plan.subjects import resolve_subjects


@pytest.fixture(scope="module")
def ci_plan():
    """The real ci plan of `--impl all` subjects available here (and the unavailable ones' placeholders)."""
    subjects = resolve_subjects("all")
    execution = {s.name: s.availability.execution for s in subjects}
    return plan(subjects, profiles.get("ci"), 0), execution


def _keys(p):
    return [item.key for items in p.values() for item in items]


@pytest.mark.parametrize("text, expected", [("1/1", (1, 1)), ("2/3", (2, 3)), (" 3 / 3 ", (3, 3))])
def test_a_shard_is_parsed(text, expected):
    assert shards.parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/2", "3/2", "x", "", "1/0", "1/2/3", "-1/2"])
def test_a_bad_shard_is_one_line_naming_the_fix(text):
    with pytest.raises(shards.ShardSyntaxError) as error:
        shards.parse_shard(text)
    message = str(error.value)
    assert "\n" not in message and "--shard 1/" in message


def test_shards_are_deterministic_complete_and_disjoint(ci_plan):
    p, execution = ci_plan
    everything = _keys(p)
    for count in (1, 2, 3, 5):
        slices = [_keys(shards.take_shard(p, execution, k, count)) for k in range(1, count + 1)]
        assert slices == [_keys(shards.take_shard(p, execution, k, count)) for k in range(1, count + 1)]
        merged = [key for keys in slices for key in keys]
        assert len(merged) == len(set(merged)), "a check in two shards"
        assert sorted(merged) == sorted(everything), "a check in no shard"


def test_shards_keep_each_case_whole_and_the_catalogue_order(ci_plan):
    p, execution = ci_plan
    owner: dict[str, int] = {}
    for k in (1, 2, 3):
        part = shards.take_shard(p, execution, k, 3)
        for check, items in part.items():
            order = [i.key for i in p[check]]
            assert [order.index(i.key) for i in items] == sorted(order.index(i.key) for i in items)
            for item in items:
                assert owner.setdefault(item.case.case_id, k) == k, f"{item.case.case_id} split"


def test_unavailable_subjects_go_to_shard_one(ci_plan):
    p, execution = ci_plan
    placeholders = {i.key for items in p.values() for i in items if i.status == "unavailable"}
    if not placeholders:
        pytest.skip("every subject is available here")
    first = set(_keys(shards.take_shard(p, execution, 1, 3)))
    assert placeholders <= first


@pytest.mark.parametrize("count", [2, 3, 4])
def test_shards_are_balanced_by_estimated_cost_not_count(ci_plan, count):
    p, execution = ci_plan
    loads = shards.shard_loads(p, execution, count)
    mean = sum(loads) / count
    assert max(loads) <= 1.25 * mean and min(loads) >= 0.75 * mean, loads

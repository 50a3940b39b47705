"""``-k`` applied to planned checks before pytest makes them test items.

A run planned over many subjects, narrowed by ``-k`` (the mutation meta-test: 66,283 planned
items, 9,356 kept), spent 54 s of its collection making items that pytest then deselects, and
testing each against the expression with a matcher that lower-cases every name for every
identifier. Here each planned check is tested once, against the same names pytest's
``KeywordMatcher`` would give its item: the names of the test function's definition (its
parents, markers and attributes, from pytest's own matcher) and the item's name, which is the
definition's name with the case id in brackets. pytest still applies ``-k`` to the items that
remain, so the selection is pytest's; this only saves the work on what it would drop.

It rests on pytest's ``KeywordMatcher`` and ``Expression``, which are not public: where they are
missing or differ, nothing is filtered early and the run is as without it. ``OFF_SWITCH=0`` in the
environment turns it off (the tests compare the two collections).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

OFF_SWITCH = "CONFORMANCE_KEYWORD_PREFILTER"


def keyword_filter(metafunc: pytest.Metafunc) -> Callable[[str], bool] | None:
    """Whether the item of ``metafunc``'s function with this parameter id survives ``-k``;
    None where there is no ``-k`` or it cannot be evaluated here the way pytest evaluates it."""
    text = (metafunc.config.getoption("keyword", default="") or "").lstrip()
    if not text or os.environ.get(OFF_SWITCH) == "0":
        return None
    try:
        from _pytest.mark import KeywordMatcher
        from _pytest.mark.expression import Expression

        expression = Expression.compile(text)
        names = KeywordMatcher.from_item(metafunc.definition)._names
    except Exception:  # noqa: BLE001 - an optimisation only: pytest's own -k still decides
        return None
    shared = tuple(name.lower() for name in names)
    stem = metafunc.definition.name.lower()
    found: dict[str, bool] = {}

    def in_shared(subname: str) -> bool:
        if subname not in found:
            found[subname] = any(subname in name for name in shared)
        return found[subname]

    def keep(test_id: str) -> bool:
        item = f"{stem}[{test_id.lower()}]"

        def matcher(subname: str, /, **kwargs: Any) -> bool:
            if kwargs:
                raise ValueError("keyword expressions take no call parameters")
            subname = subname.lower()
            return subname in item or in_shared(subname)

        return expression.evaluate(matcher)

    try:
        keep("probe")  # an expression pytest would refuse: leave it to pytest's own message
    except Exception:  # noqa: BLE001
        return None
    return keep

"""Shrinking a failing case to a minimal one with hypothesis.

``hypothesis.find`` searches ``strategies.within(case)`` (no bigger than the failing
case, a subset of its features) for a case that still fails the same way; it tries
simple cases first and then shrinks what it finds. The predicate stops claiming
failures once the time budget is spent, which ends the search quickly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis.errors import NoSuchExample, Unsatisfiable

from conformance.plan import strategies
from conformance.plan.cases import Case
from kernels.contract.base import Capabilities

MAX_EXAMPLES = 40


def _size(case: Case) -> tuple[int, int, str]:
    return (case.shape.flops, len(case.features), case.case_id)


def shrink(case: Case, caps: Capabilities, fails: Callable[[Case], bool], budget_s: float) -> Case | None:
    """The smallest case found that ``fails``; None when none was found in the budget.

    Best effort: answers are cached per candidate so hypothesis always sees the same
    answer for the same case (after the deadline, unseen candidates answer "passes"),
    and if the search still ends in an error the smallest failure seen is returned.
    """
    deadline = time.monotonic() + budget_s
    answers: dict[Case, bool] = {}

    def still_fails(candidate: Case) -> bool:
        if candidate not in answers:
            if time.monotonic() > deadline:
                return False
            answers[candidate] = candidate == case or fails(candidate)
        return answers[candidate]

    try:
        with strategies.seed_only_draws():  # the same smallest case from any checkout
            return find(
                strategies.within(case, caps),
                still_fails,
                settings=settings(
                    max_examples=MAX_EXAMPLES,
                    database=None,
                    deadline=None,
                    derandomize=True,
                    phases=[Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck),
                ),
            )
    except (NoSuchExample, Unsatisfiable):
        return None
    except Exception:  # noqa: BLE001 - e.g. hypothesis' flakiness report; shrinking is best effort
        failing = [c for c, failed in answers.items() if failed]
        return min(failing, key=_size) if failing else None

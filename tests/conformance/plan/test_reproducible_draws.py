"""The ci profile's drawn cases depend only on the seed and the suite's declarations: a pool of
unrelated literals (what editing a kernel module amounts to, for hypothesis's "local constants")
leaves them unchanged. The unguarded draw is shown to move with the same pool, so the test can fail.

The pool is set directly (``_get_local_constants``), not only by importing a module: hypothesis
ignores modules whose path has a ``tests`` folder, and under nox the temporary folder has one."""

from __future__ import annotations

import dataclasses
import importlib
import sys

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers as hypothesis_providers

from conformance.plan import catalogue, profiles
from conformance.plan.strategies import draw_cases
from tests.support.fakes import FULL, subject

INTEGERS = st.lists(st.integers(0, 999), min_size=40, max_size=40).map(tuple)


def _unguarded(strategy: st.SearchStrategy, count: int) -> list:
    found: list = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(0)
    @given(strategy)
    def collect(value) -> None:
        found.append(value)

    collect()
    return found


def _import_literals(tmp_path, name: str) -> None:
    """A fresh local module holding literals in every range a case draws from."""
    # Hypothesis skips integers within +-100 and modules of more than 1024 literals.
    literals = (*range(100, 700), *(n / 8 for n in range(1, 300)))
    (tmp_path / f"{name}.py").write_text(f"LITERALS = {literals!r}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def _literal_pool() -> hypothesis_providers.Constants:
    """Literals in every range a case draws from (hypothesis skips integers within +-100)."""
    pool = hypothesis_providers.Constants()
    for value in (*range(100, 1000), *(n / 8 for n in range(1, 2000))):
        pool.add(value)
    return pool


def _use_pool(monkeypatch, pool: hypothesis_providers.Constants) -> None:
    monkeypatch.setattr(hypothesis_providers, "_get_local_constants", lambda: pool)
    hypothesis_providers.CONSTANTS_CACHE.cache.clear()


def test_an_unrelated_literal_moves_hypothesis_own_draws_but_not_the_suites(monkeypatch):
    _use_pool(monkeypatch, hypothesis_providers.Constants())
    unguarded_before, guarded_before = _unguarded(INTEGERS, 30), draw_cases(INTEGERS, 30, 0)
    _use_pool(monkeypatch, _literal_pool())
    assert _unguarded(INTEGERS, 30) != unguarded_before  # the hole this guards against is real
    assert draw_cases(INTEGERS, 30, 0) == guarded_before
    hypothesis_providers.CONSTANTS_CACHE.cache.clear()


def test_the_ci_case_ids_survive_an_edited_literal(tmp_path, monkeypatch):
    fake = subject("fake", FULL)
    # ci's own seed and space, with more draws than its 3 so that constants come up at all.
    ci = dataclasses.replace(profiles.get("ci"), drawn_cases=30)
    before = [c.case_id for c in catalogue.cases_for(fake, ci, 0)]
    _import_literals(tmp_path, "unrelated_literals_b")
    assert [c.case_id for c in catalogue.cases_for(fake, ci, 0)] == before
    # The oracle: hypothesis with no local literals at all. (Without the guard the ids above
    # come from the pool of the suite's own modules, and 25 of these 204 differ.)
    _use_pool(monkeypatch, hypothesis_providers.Constants())
    assert [c.case_id for c in catalogue.cases_for(fake, ci, 0)] == before
    _use_pool(monkeypatch, _literal_pool())
    assert [c.case_id for c in catalogue.cases_for(fake, ci, 0)] == before
    hypothesis_providers.CONSTANTS_CACHE.cache.clear()
    assert len(before) > 100

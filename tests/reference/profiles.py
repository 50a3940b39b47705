"""Hypothesis profiles for the reference's tests, picked by ``HYPOTHESIS_PROFILE``.

    HYPOTHESIS_PROFILE=ci        derandomized: the same examples on every run (the default under CI=...)
    HYPOTHESIS_PROFILE=dev       random examples, kept in the local example database (the default)
    HYPOTHESIS_PROFILE=thorough  ten times the examples of each test, for a long local run

Each test states a modest example budget through ``examples(n)``; an explicit
``max_examples`` in ``@settings`` would override any profile, so the profile scales
the budget instead.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

_COMMON = {"deadline": None, "print_blob": True, "suppress_health_check": [HealthCheck.too_slow]}
PROFILES: dict[str, dict] = {
    "ci": {**_COMMON, "derandomize": True, "database": None},
    "dev": dict(_COMMON),
    "thorough": dict(_COMMON),
}
EXAMPLE_SCALE = {"ci": 1, "dev": 1, "thorough": 10}


def active_profile() -> str:
    return os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")


def register_and_load() -> None:
    """Register our profiles unless a profile of that name already exists (a root conftest wins)."""
    for name, options in PROFILES.items():
        try:
            settings.get_profile(name)
        except InvalidArgument:
            settings.register_profile(name, **options)
    settings.load_profile(active_profile())


def examples(n: int) -> int:
    """The example budget for a test that wants ``n`` under the normal profiles."""
    return n * EXAMPLE_SCALE.get(active_profile(), 1)

"""Hypothesis profiles for the reference's tests, picked by ``HYPOTHESIS_PROFILE``.

    HYPOTHESIS_PROFILE=ci        derandomized: the same examples on every run (the default when CI is set)
    HYPOTHESIS_PROFILE=dev       random examples, kept in the local example database (the default)
    HYPOTHESIS_PROFILE=thorough  ten times the examples of each test, for a long local run

Tests take their settings from ``profiled(n)``: the active profile as parent, with a
budget of ``n`` examples scaled by the profile. Nothing is loaded globally, so other
folders' hypothesis tests keep their own settings, and a profile of the same name
registered elsewhere first (say by a root conftest) is used as it is.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

_COMMON = {"deadline": None, "print_blob": True, "suppress_health_check": [HealthCheck.too_slow]}
PROFILES: dict[str, dict] = {
    "ci": {**_COMMON, "derandomize": True, "database": None},
    # Explicit, because hypothesis loads its own derandomized "ci" profile as the parent
    # default whenever CI is set, and dev/thorough would silently inherit that.
    "dev": {**_COMMON, "derandomize": False},
    "thorough": {**_COMMON, "derandomize": False},
}
EXAMPLE_SCALE = {"ci": 1, "dev": 1, "thorough": 10}


def active_profile() -> str:
    return os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")


def register() -> None:
    """Register our profiles unless a profile of that name already exists."""
    for name, options in PROFILES.items():
        try:
            settings.get_profile(name)
        except InvalidArgument:
            settings.register_profile(name, **options)


def profiled(max_examples: int) -> settings:
    """Settings for a test that wants ``max_examples`` under the normal profiles."""
    register()
    name = active_profile()
    try:
        parent = settings.get_profile(name)
    except InvalidArgument:
        raise ValueError(
            f"HYPOTHESIS_PROFILE={name!r} is not a registered profile; use one of {sorted(PROFILES)}"
        ) from None
    return settings(parent, max_examples=max_examples * EXAMPLE_SCALE.get(name, 1))

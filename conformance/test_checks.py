"""The pytest entry points: one ``test_<check>`` per check declared in the registry
(``conformance/suite/check_registry.py``), so ``-k test_forward`` selects a check.

The conformance plugin (``conformance/harness/plugin.py``) parametrizes each over its
planned (case, check) items and records the verdicts; the checks themselves live in
``conformance/judge/checks/``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.suite.check_registry import REGISTRY, CheckDeclaration


def _entry_point(check: CheckDeclaration) -> Callable[[Any, Any], None]:
    def test(planned: Any, conformance: Any) -> None:
        conformance.check(planned)

    test.__name__ = test.__qualname__ = f"test_{check.name}"
    test.__doc__ = f"The {check.name} check ({check.function}) on one planned case."
    return test


# Module globals are what pytest collects: one test function per declared check.
globals().update({f"test_{check.name}": _entry_point(check) for check in REGISTRY})

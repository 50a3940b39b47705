"""The mutation score line of ``nox -s tests``.

``tests/test_mutation.py`` records each mutant's outcome as a user property of its test
report; the summary counts them from the reports (no module-level state, and the
properties travel with reports from xdist workers).
"""

from __future__ import annotations

import pytest

MUTANT_PROPERTY = "mutant_caught"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    caught: dict[str, bool] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == MUTANT_PROPERTY:
                    caught[value["mutant"]] = bool(value["caught"])
    if caught:
        terminalreporter.write_line(f"mutation score: {sum(caught.values())}/{len(caught)}")

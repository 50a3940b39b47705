"""Loads the conformance plugin (``conformance/harness/plugin.py``) for ``pytest conformance``."""

from __future__ import annotations

import pytest

from conformance.harness import plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    plugin.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    plugin.configure(config)


@pytest.fixture
def conformance(request: pytest.FixtureRequest) -> plugin.Bound:
    """Runs the test's planned (check, case) and records the result."""
    return plugin.Bound(plugin.of(request.config), request.node)

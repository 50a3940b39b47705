"""The end of a run: the report is written while xdist's workers exit, and a worker's last garbage
collection walks only what is new."""

from __future__ import annotations

import gc
import types

import pluggy
import pytest
from _pytest import hookspec

from conformance.harness.plugin import ConformancePlugin


def _unlocked() -> types.SimpleNamespace:
    return types.SimpleNamespace(_lock=None)


def test_the_report_is_written_before_xdist_waits_for_its_workers_to_exit():
    """xdist registers its session after the conformance plugin, so without ``tryfirst`` its
    ``pytest_sessionfinish`` (tear the workers down, waiting for each to exit) would run first."""
    order: list[str] = []
    ours = types.SimpleNamespace(_disk_full="", recorder=None)
    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(hookspec)

    class Conformance:
        @pytest.hookimpl(**ConformancePlugin.pytest_sessionfinish.pytest_impl)
        def pytest_sessionfinish(self, session, exitstatus):
            order.append("conformance")
            ConformancePlugin.pytest_sessionfinish(ours, session, exitstatus)

    class XdistSession:  # registered later, as xdist's DSession is
        @pytest.hookimpl
        def pytest_sessionfinish(self):
            order.append("xdist tears the workers down")

    manager.register(Conformance())
    manager.register(XdistSession())
    manager.hook.pytest_sessionfinish(session=None, exitstatus=0)
    assert order == ["conformance", "xdist tears the workers down"]


def test_an_xdist_worker_freezes_what_it_holds_before_pytest_collects_at_exit():
    assert ConformancePlugin.pytest_unconfigure.pytest_impl.get("tryfirst")
    gc.unfreeze()
    try:
        ConformancePlugin.pytest_unconfigure(_unlocked(), types.SimpleNamespace())  # the controller
        assert gc.get_freeze_count() == 0
        ConformancePlugin.pytest_unconfigure(_unlocked(), types.SimpleNamespace(workerinput={}))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()

"""Shared fixtures for the report tools' tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch, request):
    """Skip fsync while building synthetic folders: durability is not under test here (except
    where a test asks for the real thing with ``@pytest.mark.real_fsync``), and a few thousand
    fsyncs would make this suite slow on a busy disk."""
    if request.node.get_closest_marker("real_fsync") is None:
        monkeypatch.setattr(os, "fsync", lambda fd: None)


def pytest_configure(config):
    config.addinivalue_line("markers", "real_fsync: keep os.fsync real in this test")

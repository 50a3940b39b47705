"""Hypothesis profiles for tests/reference (see ``profiles.py``): loaded before any test module."""

from tests.reference.profiles import register_and_load

register_and_load()

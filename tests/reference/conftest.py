"""Register the reference tests' hypothesis profiles (see ``profiles.py``), so that
``--hypothesis-profile=ci`` also names them; the tests pick theirs from HYPOTHESIS_PROFILE."""

from tests.reference.profiles import register

register()

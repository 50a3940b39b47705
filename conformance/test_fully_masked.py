"""Rows that see no key follow the declared convention and never poison other rows.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_fully_masked(planned, conformance):
    conformance.check(planned)

"""Two calls on the same inputs give bitwise identical outputs.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_determinism(planned, conformance):
    conformance.check(planned)

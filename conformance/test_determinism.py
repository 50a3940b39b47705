"""Two calls on the same inputs give bitwise identical outputs.

The logic lives in ``conformance.checks``; cases come from the adapter's declared
capabilities (``conformance.catalogue``).
"""


def test_determinism(planned, conformance):
    conformance.check(planned)

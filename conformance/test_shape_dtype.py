"""Every output has the canonical shape and the declared dtype.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_shape_dtype(planned, conformance):
    conformance.check(planned)

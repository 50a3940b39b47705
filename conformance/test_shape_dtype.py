"""Every output has the canonical shape and the declared dtype.

The logic lives in ``conformance.checks``; cases come from the adapter's declared
capabilities (``conformance.catalogue``).
"""


def test_shape_dtype(planned, conformance):
    conformance.check(planned)

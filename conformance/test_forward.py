"""out matches the float64 reference within the tolerance policy (fully masked rows excluded).

The logic lives in ``conformance.checks``; cases come from the adapter's declared
capabilities (``conformance.catalogue``).
"""


def test_forward(planned, conformance):
    conformance.check(planned)

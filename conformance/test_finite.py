"""No NaN or Inf where the float64 reference is finite; NaN padding never reaches a valid output.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_finite(planned, conformance):
    conformance.check(planned)

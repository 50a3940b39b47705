"""dq, dk, dv (and dbias) match the float64 reference within the tolerance policy.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_backward(planned, conformance):
    conformance.check(planned)

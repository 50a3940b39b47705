"""lse matches the float64 reference within the tolerance policy, where the subject exposes it.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_lse(planned, conformance):
    conformance.check(planned)

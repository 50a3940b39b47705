"""Cases a declared constraint rejects raise an exception instead of returning.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_raises(planned, conformance):
    conformance.check(planned)

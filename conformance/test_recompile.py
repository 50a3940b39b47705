"""A second call with the same shapes compiles nothing.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_recompile(planned, conformance):
    conformance.check(planned)

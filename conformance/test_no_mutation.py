"""The subject never writes into its inputs.

The logic lives in ``conformance.judge.checks``; cases come from the adapter's declared
capabilities (``conformance.plan.catalogue``).
"""


def test_no_mutation(planned, conformance):
    conformance.check(planned)

"""Purpose-built faulty implementations for the reliability meta-tests (``tests/reliability``)."""

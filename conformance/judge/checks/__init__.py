"""The check functions: ``CheckContext -> Outcome``, one per named pytest check.

They never name a subject and never call pytest: ``conformance/test_checks.py`` wraps
each one, and ``conformance.judge.runner`` turns the outcome into a result record.
"""

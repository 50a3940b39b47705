"""What the suite is to the tools around it, on the standard library alone: every check,
declared once (``check_registry``), and the options every run gets (``launch``).

The lowest layer of ``conformance/`` (docs/architecture.md): the report tools read the
checks' labels and order, and nox and bisection launch runs, without importing the rest.
"""

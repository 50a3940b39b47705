"""``python -m conformance [pytest options]``: the same run as ``nox -s conformance``, in this environment.

    python -m conformance --impl all --profile dev --report-dir reports/local

Everything after the module name goes to pytest, so ``-k``, ``-x``, ``-n 2`` and the
suite's own options (``--impl``, ``--profile``, ``--report-dir``, ``--resume``) all work.
``--impl`` imports and runs the code it names. The checks run in a worker process with
a per-test timeout (``conformance/suite/launch.py``) unless the arguments say otherwise (``-n 0``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conformance.suite.launch import isolated_args


def main(argv: list[str] | None = None) -> int:
    suite = Path(__file__).resolve().parent
    given = sys.argv[1:] if argv is None else argv
    args = [str(suite), "-p", "no:cacheprovider", *isolated_args(given)]
    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())

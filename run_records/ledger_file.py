"""The known-issue ledger as a file: where the built-in one lives and how its TOML reads.

The suite (``conformance/judge/known_issues.py``: what an entry means and matches) and the tools
(``reports/ledger/range_edit.py``: editing one entry's range in place; ``reports/bisection``:
the default ledger) read the file through here, so its path and its top-level shape are written
once. Standard library only.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

BUILTIN_LEDGER = Path(__file__).resolve().parents[1] / "kernels" / "known_issues.toml"


class LedgerError(ValueError):
    """A ledger that cannot be used: its one-line message names the file, the entry and the fix."""


def ledger_tables(text: str, source: str) -> list[dict[str, Any]]:
    """The ``[[issue]]`` tables of a ledger's text, in file order; LedgerError (naming ``source``)
    on invalid TOML, a top-level key other than ``issue``, or an ``issue`` that is not an array."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LedgerError(
            f"{source}: not valid TOML ({exc}); fix the file (format: docs/known-issues.md)"
        ) from None
    unknown = set(data) - {"issue"}
    if unknown:
        raise LedgerError(
            f"{source}: unknown top-level key(s) {sorted(unknown)}; entries are [[issue]] tables"
        )
    tables = data.get("issue", [])
    if not isinstance(tables, list):
        raise LedgerError(f"{source}: 'issue' must be an array of tables; write each entry as [[issue]]")
    return tables


def read_ledger_tables(path: Path) -> list[dict[str, Any]]:
    """``ledger_tables`` of a file; LedgerError when it is missing or not UTF-8."""
    if not path.is_file():
        raise LedgerError(f"{path}: no such ledger file; pass an existing TOML file to --known-issues")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerError(f"{path}: not UTF-8 text ({exc}); save the ledger as UTF-8") from None
    return ledger_tables(text, str(path))

"""A bisection's answer written into a known-issue ledger entry's ``jax`` range (or its ``tokamax``
range, for a bisection over tokamax releases).

The edit is textual: only the entry's ``jax = "..."`` (or ``tokamax = "..."``) value changes (or one
such line is added), so comments, key order and formatting stay as they were. The edited text is parsed
back and must differ from the original in that one value, or nothing is written.

The new range keeps what the entry said about the other side: a fix found at F replaces
the entry's upper bounds with ``<F`` and keeps its lower bounds; a regression first bad at
A replaces the lower bounds with ``>=A``. ``==V`` (seen at one release only) becomes the
bound it implies on the kept side. A kept bound that excludes a release the bisection saw
failing is dropped: the bisection is the newer evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from reports import jax_versions
from run_records.ledger_file import LedgerError, ledger_tables
from versions import table

_HEADER = re.compile(r"^\s*\[\[?[^\]]+\]\]?\s*(#.*)?$")
RANGE_KEYS = tuple(library.name for library in table.LIBRARIES)  # an entry's range keys: one per library
_CLAUSE = re.compile(r"^\s*(?P<op>~=|===|==|!=|<=|>=|<|>)\s*(?P<version>\S+)\s*$")


class LedgerEditError(ValueError):
    """The entry cannot be edited in place; the message is one line naming the fix."""


def new_range(existing: str | None, direction: str, first: Iterable[str], failing: Iterable[str]) -> str:
    """The entry's range (``jax`` or ``tokamax``: the library bisected) after a bisection.

    direction: ``regression`` (first bad releases ``first``) or ``fix`` (first fixed ``first``).
    first: the candidate releases (one unless skips left it open); the range covers every
    release that may fail: from the oldest candidate for a regression, up to the newest
    candidate (excluded) for a fix.
    failing: releases the bisection saw failing; the range must hold them.
    """
    first = jax_versions.sort_versions(list(first))
    if direction == "regression":
        bound, keep_ops, pinned = f">={first[0]}", ("<", "<="), "<="
    else:
        bound, keep_ops, pinned = f"<{first[-1]}", (">", ">="), ">="
    kept: list[str] = []
    for clause in filter(None, (c.strip() for c in (existing or "").split(","))):
        match = _CLAUSE.match(clause)
        if match is None:
            continue
        op, version = match.group("op"), match.group("version")
        if op == "==":
            kept.append(f"{pinned}{version}")
        elif op in keep_ops or op == "!=":
            kept.append(f"{op}{version}")
    failing = list(failing)
    kept = [c for c in kept if all(_holds(c, v) for v in failing)]
    lower = [c for c in [bound, *kept] if c.startswith(">")]
    rest = [c for c in [bound, *kept] if not c.startswith(">")]
    return ",".join(dict.fromkeys([*lower, *rest]))


def _holds(clause: str, version: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return version in SpecifierSet(clause)


def _range_line(key: str) -> re.Pattern[str]:
    if key not in RANGE_KEYS:
        raise LedgerEditError(f"no range {key!r} in a ledger entry; ranges are {', '.join(RANGE_KEYS)}")
    return re.compile(rf"""^(?P<head>\s*{key}\s*=\s*)(?P<q>["'])(?P<value>[^"']*)(?P=q)(?P<tail>.*)$""")


def set_range(text: str, issue_id: str, value: str, key: str = "jax") -> str:
    """``text`` (a ledger's TOML) with entry ``issue_id``'s ``key`` range (``jax`` or ``tokamax``)
    set to ``value``.

    Raises LedgerEditError when the entry is not there or the edit would change more.
    """
    line = _range_line(key)
    lines = text.splitlines(keepends=True)
    start = _entry_start(lines, issue_id)
    end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
    at = next((i for i in range(start + 1, end) if line.match(lines[i])), None)
    if at is not None:
        match = line.match(lines[at])
        newline = lines[at][len(lines[at].rstrip("\r\n")) :]
        q = match.group("q")
        lines[at] = f"{match.group('head')}{q}{value}{q}{match.group('tail')}{newline}"
    else:  # after the entry's last key line, before any blank lines or comments that follow it
        last = max(i for i in range(start, end) if lines[i].strip() and not lines[i].lstrip().startswith("#"))
        if not lines[last].endswith("\n"):
            lines[last] += "\n"
        lines.insert(last + 1, f'{key} = "{value}"\n')
    edited = "".join(lines)
    _verify(text, edited, issue_id, value, key)
    return edited


def _entry_start(lines: list[str], issue_id: str) -> int:
    """The line index of the ``[[issue]]`` header whose table has ``id = "issue_id"``."""
    header = None
    id_line = re.compile(rf"""^\s*id\s*=\s*(["']){re.escape(issue_id)}\1\s*(#.*)?$""")
    for i, line in enumerate(lines):
        if _HEADER.match(line):
            header = i
        elif header is not None and id_line.match(line):
            return header
    raise LedgerEditError(
        f"no ledger entry with id {issue_id!r}; copy an id from the ledger's [[issue]] tables"
    )


def _verify(before: str, after: str, issue_id: str, value: str, key: str) -> None:
    """The edit changed that entry's range value and nothing else, as TOML reads it."""
    old, new = _tables(before), _tables(after)
    expected = [{**entry, key: value} if entry.get("id") == issue_id else entry for entry in old]
    if new != expected:
        raise LedgerEditError(
            f'the entry {issue_id!r} could not be edited in place; set its line to: {key} = "{value}"'
        )


def entry_range(text: str, issue_id: str, key: str = "jax") -> str | None:
    """The entry's current ``key`` range (``jax`` or ``tokamax``; None when it has none);
    LedgerEditError if no such entry."""
    _range_line(key)
    for entry in _tables(text):
        if entry.get("id") == issue_id:
            return entry.get(key)
    raise LedgerEditError(
        f"no ledger entry with id {issue_id!r}; copy an id from the ledger's [[issue]] tables"
    )


def _tables(text: str) -> list[dict]:
    """The ledger's entries (``run_records/ledger_file.py``), as an edit error when it does not read."""
    try:
        return ledger_tables(text, "the ledger")
    except LedgerError as error:
        raise LedgerEditError(f"{error}, then rerun") from None

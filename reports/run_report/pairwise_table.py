"""The report's table of pairwise coverage: for each subject, how many present/absent
combinations of two optional inputs its cases run, how many its declaration rules out, and
which are left (from summary.json's ``pairwise``, written by the conformance plugin)."""

from __future__ import annotations

from typing import Any

from reports.run_report import markdown as md

MAX_LISTED = 8  # uncovered or ruled-out combinations named per subject


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" (+{len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else "")


def pairwise_section(summary: dict[str, Any] | None) -> str | None:
    """The section, or None for a run that recorded no coverage (older runs, no subject)."""
    records = (summary or {}).get("pairwise")
    if not isinstance(records, dict) or not records:
        return None
    rows = []
    for subject, r in sorted(records.items()):
        if not r.get("features"):
            continue
        excluded = [f"{e['combination']} ({md.truncate(e['reason'], 80)})" for e in r.get("excluded", [])]
        uncovered = list(r.get("uncovered", []))
        rows.append(
            [
                f"**{subject}**",
                ", ".join(r["features"]),
                f"{r['covered']} of {r['combinations']}",
                _listed(excluded) if excluded else "none",
                ("⚠️ " + _listed(uncovered)) if uncovered else "none",
            ]
        )
    if not rows:
        return None
    table = md.table(
        ["subject", "optional inputs declared", "pairs run", "ruled out by the declaration", "not covered"],
        rows,
    )
    return (
        "**Pairwise coverage of optional inputs.** Each pair of the optional inputs a subject "
        "declares, in all four present/absent combinations, should run in some case.\n\n" + table
    )

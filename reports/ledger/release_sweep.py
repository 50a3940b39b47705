"""Where each known issue reproduces, release by release, and whether its ``jax`` range says so.

A ledger range bounded by the versions a matrix happens to list is wrong for a user on a
release between them. So each built-in entry records a sweep (its ``bisection`` table):
the span of releases tried, every final release of the index inside it, and the ones it
reproduced at. ``range_problem`` holds the range to that record: every release that
reproduced is inside the range, every one that ran clean is outside it. An entry that a
CPU cannot observe (a native-GPU defect) records why instead (``not_observable``).

``reproducing`` reads the sweep's report folders (one conformance run per release, each
``summary.json`` giving every entry's status), so a sweep is rerun with nothing but the
suite: ``python -m reports ledger-sweep reports/sweep/jax-*``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

# Every final JAX release from the oldest the suite supports to the newest it was swept at
# (pip's index, 2026-12-04): the span a built-in entry's sweep covers.
SWEPT_RELEASES: tuple[str, ...] = (
    "0.4.35", "0.4.36", "0.4.37", "0.4.38", "0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.6.0",
    "0.6.1", "0.6.2", "0.7.0", "0.7.1", "0.7.2", "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.9.0",
    "0.9.0.1", "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.2",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one release's run said of one entry: ``reproduced``, ``clean`` (its checks ran and
    none failed as it describes), or ``unobserved`` (its subject or checks did not run)."""

    version: str
    state: str


def observe(status: Mapping[str, object]) -> str:
    """One entry's summary.json status -> reproduced / clean / unobserved, whatever its range."""
    state = status.get("status")
    if state == "reproduced":
        return "reproduced"
    if state == "no longer reproduces":
        return "clean"
    if state == "out of range":
        if int(status.get("failing_outside_range", 0) or 0):
            return "reproduced"
        return "clean" if int(status.get("ran_outside_range", 0) or 0) else "unobserved"
    return "unobserved"


def reproducing(folders: Iterable[Path]) -> dict[str, list[Observation]]:
    """entry id -> what each swept release said, oldest first, from the folders' summary.json."""
    out: dict[str, list[Observation]] = {}
    runs = []
    for folder in folders:
        summary = json.loads((Path(folder) / "summary.json").read_text(encoding="utf-8"))
        version = summary["environment"]["libraries"]["jax"]
        runs.append((Version(version), version, summary))
    for _, version, summary in sorted(runs):
        for status in summary.get("known_issues", []):
            out.setdefault(status["id"], []).append(Observation(version, observe(status)))
    return out


def range_problem(issue_id: str, jax_range: str, bisection: Mapping[str, object] | None) -> str | None:
    """Why an entry's range disagrees with its recorded sweep, or None.

    ``bisection``: ``{span = [first, last], reproduces = [...], clean = [...]}`` (releases
    that did not run, e.g. before the subject existed, are in neither list), or
    ``{not_observable = "why"}`` (a CPU cannot see it) or ``{not_swept = "why"}`` (the
    narrowed sweep could not select its case: named, so it shows in review)."""
    if not bisection:
        return f"{issue_id}: no recorded sweep (bisection = {{...}}): run python -m reports ledger-sweep"
    for key in ("not_observable", "not_swept"):  # a CPU cannot see it / the ci sweep cannot select it
        if key in bisection:
            reason = str(bisection[key]).strip()
            return None if reason else f"{issue_id}: {key} needs the reason"
    span = list(bisection.get("span", []))
    reproduces = [str(v) for v in bisection.get("reproduces", [])]
    clean = [str(v) for v in bisection.get("clean", [])]
    if len(span) != 2 or not reproduces:
        return f"{issue_id}: a sweep records span = [first, last] and the releases it reproduced at"
    inside = [v for v in SWEPT_RELEASES if Version(span[0]) <= Version(v) <= Version(span[1])]
    strays = sorted(set(reproduces + clean) - set(inside))
    if strays:
        return f"{issue_id}: {strays} are not releases inside the span {span}"
    specifier = SpecifierSet(jax_range, prereleases=True)
    outside = [v for v in reproduces if Version(v) not in specifier]
    inside_clean = [v for v in clean if Version(v) in specifier]
    if outside or inside_clean:
        return (
            f"{issue_id}: jax = {jax_range!r} disagrees with its sweep: reproduces outside it at "
            f"{outside or 'none'}, clean inside it at {inside_clean or 'none'}"
        )
    return None


def suggested_range(observations: list[Observation]) -> str:
    """The narrowest ``>=A,<B`` holding every reproducing release and no clean one (open where
    the sweep reproduced at its end)."""
    seen = [o for o in observations if o.state != "unobserved"]
    hits = [o.version for o in seen if o.state == "reproduced"]
    if not hits:
        return ""
    first, last = hits[0], hits[-1]
    later_clean = [o.version for o in seen if o.state == "clean" and Version(o.version) > Version(last)]
    clauses = [] if first == SWEPT_RELEASES[0] else [f">={first}"]
    if later_clean:
        clauses.append(f"<{later_clean[0]}")
    return ",".join(clauses) or f">={first}"


def table(observations: dict[str, list[Observation]]) -> str:
    """One line per entry: where it reproduced, where it ran clean, and the range that says so."""
    lines = []
    for issue_id, seen in observations.items():
        hits = [o.version for o in seen if o.state == "reproduced"]
        clean = [o.version for o in seen if o.state == "clean"]
        lines.append(
            f"{issue_id}: reproduces {hits or 'nowhere'}; clean {clean or 'nowhere'}; "
            f"range {suggested_range(seen) or '(none)'}"
        )
    return "\n".join(lines)

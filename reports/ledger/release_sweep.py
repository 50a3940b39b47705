"""Where each known issue reproduces, release by release, and whether its ranges say so.

A ledger range bounded by the versions a matrix happens to list is wrong for a user on a
release between them. So each built-in entry records a sweep (its ``bisection`` table):
the span of releases tried, every final release of the index inside it, and the ones it
reproduced at. ``range_problem`` holds the range to that record: every release that
reproduced is inside the range, every one that ran clean is outside it. An entry that a
CPU cannot observe (a native-GPU defect) records why instead (``not_observable``).

``reproducing`` reads the sweep's report folders (one conformance run per release, each
``summary.json`` giving every entry's status), so a sweep is rerun with nothing but the
suite: ``python -m reports ledger-sweep reports/sweep/jax-*``.

Two libraries are swept. An entry with only a ``jax`` range is swept over JAX releases. An entry
with a ``tokamax`` range is swept over tokamax releases at a fixed jax (one folder per release,
``conformance(jax='0.10.2', tokamax='0.0.X')``): its record says so,
``bisection = { library = "tokamax", jax = "0.10.2", span = [...], reproduces = [...], clean = [...] }``,
and its tokamax range is held to it as the jax range is to a JAX sweep.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from versions import table as version_table

# Every final release of each library, oldest first (versions/table.py): the span a built-in entry's
# sweep covers lies inside it. A range open below starts at the oldest release the matrix covers.
SWEEPS: dict[str, tuple[str, ...]] = {
    library.name: tuple(r.version for r in library.releases) for library in version_table.LIBRARIES
}
SWEPT_RELEASES: tuple[str, ...] = SWEEPS["jax"]
TOKAMAX_SWEPT_RELEASES: tuple[str, ...] = SWEEPS["tokamax"]
OLDEST = {library.name: library.matrix[0] for library in version_table.LIBRARIES}


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one release's run said of one entry: ``reproduced``, ``clean`` (its checks ran and
    none failed as it describes), or ``unobserved`` (its subject or checks did not run).

    library: whose release ``version`` is: ``jax``, or ``tokamax`` (then ``at`` is the jax it ran with).
    """

    version: str
    state: str
    library: str = "jax"
    at: str | None = None


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


def _tokamax(environment: Mapping[str, object]) -> str | None:
    """The tokamax a run recorded: the environment's explicit version, else its library list."""
    if "tokamax" in environment:
        return None if environment["tokamax"] is None else str(environment["tokamax"])
    libraries = environment.get("libraries")
    found = libraries.get("tokamax") if isinstance(libraries, Mapping) else None
    return str(found) if found else None


def reproducing(folders: Iterable[Path]) -> dict[str, list[Observation]]:
    """entry id -> what each swept release said, oldest first, from the folders' summary.json.

    An entry with a tokamax range is observed over tokamax releases, each at the jax it ran with
    (a folder without tokamax says nothing of it). Any other entry is observed over JAX releases, one
    observation per release (folders at one jax with different tokamax are merged: reproduced
    anywhere wins), and also over tokamax releases wherever the folders hold a tokamax sweep (two
    or more tokamax releases at one jax) and it was observed there: the sweep that tells whether it
    needs a tokamax range."""
    runs = []
    for folder in folders:
        summary = json.loads((Path(folder) / "summary.json").read_text(encoding="utf-8"))
        environment = summary["environment"]
        jax, tokamax = environment["libraries"]["jax"], _tokamax(environment)
        runs.append(((Version(jax), Version(tokamax or "0")), jax, tokamax, summary))
    tokamax_at: dict[str, set[str]] = {}
    for _, jax, tokamax, _ in runs:
        if tokamax is not None:
            tokamax_at.setdefault(jax, set()).add(tokamax)
    seen: dict[str, dict[tuple[str, str | None, str], list[str]]] = {}
    for _, jax, tokamax, summary in sorted(runs, key=lambda run: run[0]):
        for status in summary.get("known_issues", []):
            by_release = seen.setdefault(status["id"], {})
            ranged = bool(status.get("tokamax"))
            if not ranged:
                by_release.setdefault(("jax", None, jax), []).append(observe(status))
            if tokamax is not None and (ranged or len(tokamax_at[jax]) > 1):
                by_release.setdefault(("tokamax", jax, tokamax), []).append(observe(status))
    out: dict[str, list[Observation]] = {}
    for issue_id, by_release in seen.items():
        observations = [
            Observation(version, _strongest(states), library, at)
            for (library, at, version), states in by_release.items()
        ]
        observed_at = {o.at for o in observations if o.library == "tokamax" and o.state != "unobserved"}
        out[issue_id] = [o for o in observations if o.library == "jax" or o.at in observed_at]
    return out


def _strongest(states: list[str]) -> str:
    return next((s for s in ("reproduced", "clean") if s in states), "unobserved")


def range_problem(
    issue_id: str, jax_range: str, bisection: Mapping[str, object] | None, tokamax_range: str = ""
) -> str | None:
    """Why an entry's ranges disagree with its recorded sweep, or None.

    ``bisection``: ``{span = [first, last], reproduces = [...], clean = [...]}`` (releases
    that did not run, e.g. before the subject existed, are in neither list), or
    ``{not_observable = "why"}`` (a CPU cannot see it) or ``{not_swept = "why"}`` (the
    narrowed sweep could not select its case: named, so it shows in review). A sweep of tokamax
    releases adds ``library = "tokamax"`` and the ``jax`` it held fixed; an entry with a
    ``tokamax_range`` needs one, and its jax range must hold that jax."""
    if not bisection:
        return f"{issue_id}: no recorded sweep (bisection = {{...}}): run python -m reports ledger-sweep"
    for key in ("not_observable", "not_swept"):  # a CPU cannot see it / the ci sweep cannot select it
        if key in bisection:
            reason = str(bisection[key]).strip()
            return None if reason else f"{issue_id}: {key} needs the reason"
    library = str(bisection.get("library", "jax"))
    if library not in SWEEPS:
        return f"{issue_id}: bisection.library = {library!r}; write jax or tokamax"
    if tokamax_range and library != "tokamax":
        return (
            f"{issue_id}: tokamax = {tokamax_range!r} but its sweep walks jax releases; sweep tokamax "
            'releases at a fixed jax and record bisection = { library = "tokamax", jax = "X", span = [...], '
            "reproduces = [...], clean = [...] }"
        )
    span = list(bisection.get("span", []))
    reproduces = [str(v) for v in bisection.get("reproduces", [])]
    clean = [str(v) for v in bisection.get("clean", [])]
    if len(span) != 2 or not reproduces:
        return f"{issue_id}: a sweep records span = [first, last] and the releases it reproduced at"
    if library == "tokamax":
        fixed = str(bisection.get("jax", "")).strip()
        if not fixed:
            return f'{issue_id}: a tokamax sweep records the jax it held fixed: jax = "0.10.2"'
        if Version(fixed) not in SpecifierSet(jax_range, prereleases=True):
            return f"{issue_id}: swept at jax {fixed}, outside its jax = {jax_range!r}; sweep inside it"
    inside = [v for v in SWEEPS[library] if Version(span[0]) <= Version(v) <= Version(span[1])]
    strays = sorted(set(reproduces + clean) - set(inside))
    if strays:
        return f"{issue_id}: {strays} are not releases inside the span {span} ({library} releases)"
    specifier_text = tokamax_range if library == "tokamax" else jax_range
    specifier = SpecifierSet(specifier_text, prereleases=True)
    outside = [v for v in reproduces if Version(v) not in specifier]
    inside_clean = [v for v in clean if Version(v) in specifier]
    if outside or inside_clean:
        return (
            f"{issue_id}: {library} = {specifier_text!r} disagrees with its sweep: reproduces outside it at "
            f"{outside or 'none'}, clean inside it at {inside_clean or 'none'}"
        )
    return None


def suggested_range(observations: list[Observation]) -> str:
    """The narrowest ``>=A,<B`` holding every reproducing release and no clean one (open where
    the sweep reproduced at its end), over the observations' library (one library, one fixed jax)."""
    seen = [o for o in observations if o.state != "unobserved"]
    hits = [o.version for o in seen if o.state == "reproduced"]
    if not hits:
        return ""
    first, last = hits[0], hits[-1]
    later_clean = [o.version for o in seen if o.state == "clean" and Version(o.version) > Version(last)]
    clauses = [] if first == OLDEST[observations[0].library] else [f">={first}"]
    if later_clean:
        clauses.append(f"<{later_clean[0]}")
    return ",".join(clauses) or f">={first}"


def table(observations: dict[str, list[Observation]]) -> str:
    """One line per entry (per fixed jax for a tokamax sweep): where it reproduced, where it ran
    clean, and the range that says so."""
    lines = []
    for issue_id, seen in observations.items():
        groups: dict[tuple[str, str | None], list[Observation]] = {}
        for o in seen:
            groups.setdefault((o.library, o.at), []).append(o)
        for (library, at), group in groups.items():
            hits = [o.version for o in group if o.state == "reproduced"]
            clean = [o.version for o in group if o.state == "clean"]
            name = issue_id if library == "jax" else f"{issue_id} (tokamax releases at jax {at})"
            word = "range" if library == "jax" else "tokamax range"
            lines.append(
                f"{name}: reproduces {hits or 'nowhere'}; clean {clean or 'nowhere'}; "
                f"{word} {suggested_range(group) or '(none)'}"
            )
    return "\n".join(lines)

"""The JAX version matrix: which versions nox knows, what each one's environment
needs, and which versions a nox command line asks for.

Pure functions of their arguments (the noxfile passes ``sys.argv`` and
``os.environ``), so the selection rules are unit-tested without running nox.

Why the noxfile reads its own command line: ``conformance`` is parametrized over
JAX versions, and nox runs *every* parametrization when given a bare session name.
Plain ``nox -s conformance`` must run at the newest JAX only, and
``nox -s "conformance(jax='X')"`` must work for any X, not only the listed ones.
nox has no hook for either, so ``session_versions`` looks at the
session selectors before nox builds its session list:

* a bare ``conformance`` selector narrows the list to ``NEWEST`` (plus any
  version named explicitly in the same command);
* ``conformance(jax='X')`` adds X to the list if it is not there;
* no conformance selector at all (``nox -l``, ``nox -k conformance``) keeps the
  whole matrix, so ``nox -k conformance`` is how to run every version.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from versions import table

if TYPE_CHECKING:
    from packaging.version import Version

# The matrix, the pins and the tokamax releases are rows of versions/table.py (THE table); the
# names below are that table's, kept for the modules and tests that read them.
MATRIX: tuple[str, ...] = table.JAX.matrix
NEWEST = table.JAX.newest
SESSION = "conformance"
PINS: tuple[tuple[str, str, tuple[str, ...], str], ...] = tuple(
    (p.first, p.last, p.requirements, p.why) for p in table.JAX.pins
)
ALWAYS: tuple[str, ...] = table.JAX.always
# Newest first, as (release, oldest jax, note).
TOKAMAX_RELEASES: tuple[tuple[str, str, str], ...] = tuple(
    (r.version, dict(r.needs)["jax"], r.note) for r in reversed(table.TOKAMAX.releases)
)
TOKAMAX_MATRIX: tuple[str, ...] = table.TOKAMAX.matrix
TOKAMAX_NEEDS_JAX: tuple[tuple[str, str], ...] = tuple(
    (release, needs) for release, needs, _ in TOKAMAX_RELEASES if release in TOKAMAX_MATRIX
)  # newest first, as TOKAMAX_RELEASES

_VERSION = re.compile(r"^\d+(\.\d+){1,3}$")


@functools.cache
def _selector(session: str) -> re.Pattern[str]:
    """Matches "<session>(jax='X')" (and nox's "<session>-3.11(jax='X')" spelling)."""
    name = re.escape(session)
    return re.compile(rf"""^\s*{name}(?:-[\d.]+)?\(\s*jax\s*=\s*(['"])(?P<version>[^'"]*)\1\s*\)\s*$""")


def parse_version(version: str) -> Version:
    """``"0.7.0rc1"`` -> ``Version("0.7.0rc1")`` (PEP 440, so 0.7.0rc1 < 0.7.0 < 0.10.2); raises
    ``packaging.version.InvalidVersion``. PEP 440 through ``packaging``, as ``kernels.runtime.jax_runtime``
    reads the installed version.

    ``packaging`` is imported here, not at module level: the gate (``nox -s gate``) runs with
    no installs and imports this module (through ``reports.matrix``), but never parses a version.
    """
    from packaging.version import Version

    return Version(version)


def version_key(version: str) -> Version:
    """'0.4.38' -> Version('0.4.38'); for sorting folders and comparing against PINS."""
    return parse_version(version)


def sort_versions(versions: Sequence[str]) -> list[str]:
    """Release numbers in release order; anything else after them, alphabetically."""
    return sorted(versions, key=lambda v: (0, version_key(v), "") if _VERSION.match(v) else (1, (), v))


def requested_selectors(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The session names given to nox, as nox itself reads them.

    argv: nox's arguments without the program name. Mirrors nox's parser: -s, -e,
    --session and --sessions take any number of values, the last use wins, and
    NOXSESSION (comma-separated) applies only when none is given. Posargs after
    ``--`` are never selectors.
    """
    if "--" in argv:
        argv = argv[: list(argv).index("--")]
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("-s", "-e", "--sessions", "--session", dest="sessions", nargs="*")
    known, _ = parser.parse_known_args(list(argv))
    if known.sessions is not None:
        return tuple(known.sessions)
    return tuple(s for s in environ.get("NOXSESSION", "").split(",") if s)


def selected_version(selector: str, session: str = SESSION) -> str | None:
    """ "conformance(jax='0.4.38')" -> '0.4.38'; None for any other selector."""
    match = _selector(session).match(selector)
    return match.group("version") if match else None


def session_versions(
    argv: Sequence[str], environ: Mapping[str, str], session: str = SESSION
) -> tuple[str, ...]:
    """The parameter list for a session parametrized over JAX versions (``conformance`` unless
    ``session`` names another, e.g. ``bench``): the rules in the module docstring."""
    selectors = requested_selectors(argv, environ)
    named = [v for v in (selected_version(s, session) for s in selectors) if v is not None]
    if session in (s.strip() for s in selectors):
        return tuple(dict.fromkeys([NEWEST, *named]))
    return tuple(dict.fromkeys([*MATRIX, *named]))


def version_problem(version: str) -> str | None:
    """One line naming what is wrong with a requested version and the fix, or None."""
    if not _VERSION.match(version):
        return (
            f"jax {version!r} is not a release number; name one like "
            f"\"conformance(jax='{NEWEST}')\" (known: {', '.join(MATRIX)})"
        )
    if pins_for(version) is None:
        return (
            f"jax {version} is older than any row of the jax pins in versions/table.py; "
            f"use {MATRIX[0]} or newer, or add a row with the pins it needs"
        )
    return None


def pins_for(version: str) -> tuple[str, ...] | None:
    """The extra requirements for one JAX version (ALWAYS included), or None if no row covers it."""
    key = version_key(version)
    for first, last, requirements, _why in PINS:
        if version_key(first) <= key <= version_key(last):
            return (*requirements, *ALWAYS)
    return None


def requirements_for(version: str) -> tuple[str, ...]:
    """What to install for one JAX version: jax itself (jaxlib follows) plus its pins."""
    pins = pins_for(version)
    if pins is None:
        raise ValueError(version_problem(version))
    return (f"jax=={version}", *pins)


def tokamax_for(jax_version: str) -> str | None:
    """The newest tokamax release of the matrix that installs with ``jax_version`` under that JAX's own
    Python (``python_for``): jax 0.10.2 (Python 3.11) gets 0.0.12, not 0.0.15, which would move the
    whole run to Python 3.12. None when every one needs a newer JAX: the tokamax subjects are then
    unavailable (they say so)."""
    jax = version_key(jax_version)
    python = table.JAX.python_for(jax_version)
    return next(
        (
            t
            for t, needs in TOKAMAX_NEEDS_JAX
            if jax >= version_key(needs)
            and table.release_number(table.TOKAMAX.python_for(t)) <= table.release_number(python)
        ),
        None,
    )


def python_for(jax: str, tokamax: str | None = None) -> str:
    """The Python a run of (jax, tokamax) needs: the newest that either release needs (the table's
    ``pythons`` rows: jax 0.11.0 and tokamax 0.0.13 on need 3.12)."""
    needed = [table.JAX.python_for(jax), *([table.TOKAMAX.python_for(tokamax)] if tokamax else [])]
    return max(needed, key=table.release_number)


def tokamax_requirements(jax_version: str) -> tuple[str, ...]:
    """``("tokamax==X",)`` for the newest release ``jax_version`` takes, else ``()``."""
    release = tokamax_for(jax_version)
    return () if release is None else (f"tokamax=={release}",)


@functools.cache
def _pair_selector(session: str) -> re.Pattern[str]:
    """Matches "<session>(jax='X', tokamax='Y')" (and nox's "<session>-3.11(...)" spelling)."""
    name = re.escape(session)
    quoted = r"""(['"])(?P<{}>.*?)\{}"""
    return re.compile(
        rf"""^\s*{name}(?:-[\d.]+)?\(\s*jax\s*=\s*{quoted.format("jax", 1)}\s*,"""
        rf"""\s*tokamax\s*=\s*{quoted.format("tokamax", 3)}\s*\)\s*$"""
    )


def selected_pair(selector: str, session: str = SESSION) -> tuple[str, str] | None:
    """ "conformance(jax='0.9.2', tokamax='0.0.11')" -> ('0.9.2', '0.0.11'); None otherwise."""
    match = _pair_selector(session).match(selector)
    return (match.group("jax"), match.group("tokamax")) if match else None


def session_pairs(
    argv: Sequence[str], environ: Mapping[str, str], session: str = SESSION
) -> tuple[tuple[str, str | None], ...]:
    """The ``(jax, tokamax)`` parameters of ``conformance``: each of ``session_versions`` with the
    tokamax its install picks (None: ``install_project``'s choice), then every pair named as
    ``conformance(jax='X', tokamax='Y')``."""
    named = [p for p in (selected_pair(s, session) for s in requested_selectors(argv, environ)) if p]
    plain = [(v, None) for v in session_versions(argv, environ, session)]
    return tuple(dict.fromkeys([*plain, *named]))


def run_key(jax: str, tokamax: str | None = None) -> tuple[tuple[str, str], ...]:
    """The ordered ``(library, version)`` tuple a run is keyed by: jax, then each companion installed."""
    return tuple((name, v) for name, v in (("jax", jax), ("tokamax", tokamax)) if v is not None)


def session_id(jax: str, tokamax: str | None) -> str:
    """nox's id of one parameter pair: ``jax='X'`` (as nox names a one-parameter session, so the
    environment folders and every documented command keep their names) or ``jax='X', tokamax='Y'``."""
    return ", ".join(f"{name}='{v}'" for name, v in run_key(jax, tokamax))


def folder_name(key: tuple[tuple[str, str], ...]) -> str:
    """``jax-X`` or ``jax-X-tokamax-Y``: each library's folder token and version, in table order."""
    tokens = {library.name: library.folder_token for library in table.LIBRARIES}
    return "-".join(f"{tokens[name]}-{v}" for name, v in key)


def report_folder(jax: str, tokamax: str | None) -> str:
    """``reports/jax-X`` or, with a tokamax release named, ``reports/jax-X-tokamax-Y``."""
    return f"reports/{folder_name(run_key(jax, tokamax))}"


def tokamax_needs(tokamax: str) -> str | None:
    """The oldest JAX a tokamax release installs with (``TOKAMAX_RELEASES``); None for an unknown one."""
    return next((needs for release, needs, _ in TOKAMAX_RELEASES if release == tokamax), None)


def tokamax_problem(tokamax: str, jax: str) -> str | None:
    """One line naming what is wrong with a requested (jax, tokamax) pair and the fix, or None."""
    needs = tokamax_needs(tokamax)
    if needs is None:
        return (
            f"tokamax {tokamax!r} is not a release in versions/table.py; name one of "
            f"{', '.join(r for r, _, _ in TOKAMAX_RELEASES)} (the suite covers {', '.join(TOKAMAX_MATRIX)})"
        )
    if _VERSION.match(jax) and version_key(jax) < version_key(needs):
        return (
            f"tokamax {tokamax} needs jax >= {needs}, not {jax}; "
            f"use \"conformance(jax='{needs}', tokamax='{tokamax}')\" or a newer jax"
        )
    return None


def install_failure(version: str, installer_output: str) -> str:
    """One line for a failed install: the installer's own reason, and the fix."""
    lines = [line.strip() for line in installer_output.splitlines() if line.strip()]
    cause = next((line for line in lines if "because" in line.lower()), None)
    cause = cause or next(
        (line for line in lines if line.lower().startswith("error")), "the installer failed"
    )
    cause = re.sub(r"^(cause:|error:|[\W_]+)\s*", "", cause, flags=re.IGNORECASE)
    missing = (
        rf"(no (matching )?versions? of|no matching distribution found for) jax==\s*{re.escape(version)}\b"
    )
    if re.search(missing, cause.lower()):
        return (
            f"jax {version} cannot be installed: no such release on the package index. "
            f"Fix: pick a released version (`pip index versions jax`); the matrix knows {', '.join(MATRIX)}"
        )
    return (
        f"jax {version} cannot be installed: {cause} Fix: adjust that version's row in "
        "versions/table.py's jax pins, or pick another version; rerun with -v for the installer's output"
    )

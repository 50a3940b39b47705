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

if TYPE_CHECKING:
    from packaging.version import Version

# Every version the matrix runs, oldest first; the last one is what a bare
# `nox -s conformance` (and `nox -s tests`) installs: the newest release at the
# time of writing.
MATRIX: tuple[str, ...] = ("0.4.35", "0.4.38", "0.5.3", "0.6.2", "0.7.2", "0.8.3", "0.9.2", "0.10.2")
NEWEST = MATRIX[-1]
SESSION = "conformance"

# THE table of pins that JAX versions need beyond pyproject.toml. Rows are
# (first jax version, last jax version, requirements, why); the first row whose
# range holds the version applies. `jaxlib` is never pinned here: every jax
# release requires `jaxlib<=its own version`, so the resolver picks the right one
# even for 0.4.37 and 0.5.2, which have no jaxlib of the same number.
PINS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "0.4.31",
        "999",
        ("numpy>=1.26,<3", "ml_dtypes>=0.4", "scipy>=1.10"),
        "checked here: 0.4.35 to 0.10.2 import and run Pallas with numpy 2.4, ml_dtypes 0.7, scipy 1.17",
    ),
    (
        "0.4.0",
        "0.4.30",
        ("numpy>=1.24,<2", "ml_dtypes>=0.2,<0.5", "scipy>=1.10,<1.15"),
        "jaxlib before 0.4.31 is built against NumPy 1.x (jax <= 0.4.23 breaks on numpy 2)",
    ),
)
# Pallas imports absl on several versions without declaring it.
ALWAYS: tuple[str, ...] = ("absl-py>=1",)

# THE tokamax table: every release the package index offers, newest first, with the oldest JAX
# it requires (its package metadata; none has an upper bound on jax) and what else it pulls in.
# An upgrade of jax and tokamax is one decision: `conformance(jax='X', tokamax='Y')` is refused in
# one line when Y needs a newer X (`tokamax_problem`).
TOKAMAX_RELEASES: tuple[tuple[str, str, str], ...] = (
    ("0.0.12", "0.9.2", ""),
    ("0.0.11", "0.9.1", "TPU backward in its own module, with layout and scheduler fields"),
    ("0.0.10", "0.8.2", "Mosaic TPU attention registered; tensorflow dropped"),
    ("0.0.9", "0.8.2", "pulls tensorflow; module renames (pallas_triton.py)"),
    ("0.0.8", "0.8.1", "pulls tensorflow"),
    ("0.0.7", "0.8.1", "pulls tensorflow; qwix QArray"),
    ("0.0.6", "0.8.0", "pulls tensorflow and qwix"),
    ("0.0.5", "0.8.0", "pulls tensorflow and qwix"),
    ("0.0.4", "0.8.0", "pulls tensorflow"),
    ("0.0.3", "0.8.0", "pulls tensorflow"),
    ("0.0.2", "0.7.2", "pulls tensorflow, jax-triton and the cuda12/tpu extras"),
    ("0.0.1", "0.7.2", "pulls tensorflow, torch_xla, jax-triton and the cuda12/tpu extras"),
)
# The releases the suite covers (kernels/tokamax.py reads 0.0.10 on: Mosaic TPU attention), oldest
# first: the tokamax matrix, the default sweep and the default install. Older ones run when named
# (`conformance(jax='0.8.3', tokamax='0.0.9')`). The newest is the pyproject.toml `tokamax` group's
# pin (a test holds them equal).
TOKAMAX_MATRIX: tuple[str, ...] = ("0.0.10", "0.0.11", "0.0.12")
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
    ``packaging.version.InvalidVersion``. PEP 440 through ``packaging``, as ``kernels.jax_runtime``
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
            f"jax {version} is older than any row of the pins table in reports/jax_versions.py; "
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
    """The newest tokamax release (``TOKAMAX_NEEDS_JAX``) that installs with ``jax_version``, or
    None when every one needs a newer JAX: the tokamax subjects are then unavailable (they say so)."""
    jax = version_key(jax_version)
    return next((t for t, needs in TOKAMAX_NEEDS_JAX if jax >= version_key(needs)), None)


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


def session_id(jax: str, tokamax: str | None) -> str:
    """nox's id of one parameter pair: ``jax='X'`` (as nox names a one-parameter session, so the
    environment folders and every documented command keep their names) or ``jax='X', tokamax='Y'``."""
    return f"jax='{jax}'" if tokamax is None else f"jax='{jax}', tokamax='{tokamax}'"


def report_folder(jax: str, tokamax: str | None) -> str:
    """``reports/jax-X`` or, with a tokamax release named, ``reports/jax-X-tokamax-Y``."""
    return f"reports/jax-{jax}" if tokamax is None else f"reports/jax-{jax}-tokamax-{tokamax}"


def tokamax_needs(tokamax: str) -> str | None:
    """The oldest JAX a tokamax release installs with (``TOKAMAX_RELEASES``); None for an unknown one."""
    return next((needs for release, needs, _ in TOKAMAX_RELEASES if release == tokamax), None)


def tokamax_problem(tokamax: str, jax: str) -> str | None:
    """One line naming what is wrong with a requested (jax, tokamax) pair and the fix, or None."""
    needs = tokamax_needs(tokamax)
    if needs is None:
        return (
            f"tokamax {tokamax!r} is not a release in reports/jax_versions.py TOKAMAX_RELEASES; name one of "
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
        "reports/jax_versions.py PINS, or pick another version; rerun with -v for the installer's output"
    )

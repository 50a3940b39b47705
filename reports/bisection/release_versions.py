"""Which JAX (or tokamax) releases exist: from the package index the machine's pip is configured with, or
from a list given offline. Bisection searches the releases between two of them.

The index is never named here: ``pip index versions`` asks whichever index pip's own
configuration (pip.conf, ``PIP_*`` variables) points at.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence

from reports import jax_versions
from versions import table

NEWEST_PYTHON = max(
    (python for library in table.LIBRARIES for _, python in library.pythons), key=table.release_number
)
_AVAILABLE = re.compile(r"^\s*Available versions:\s*(?P<versions>.*)$", re.MULTILINE)
_RELEASE = re.compile(r"^\d+(\.\d+){1,3}$")  # final releases only: no rc, dev or post


class VersionListError(ValueError):
    """The releases could not be listed; the message is one line naming the fix."""


def parse_pip_index(output: str, package: str = "jax") -> list[str]:
    """The final releases in ``pip index versions PACKAGE`` output, oldest first.

    pip prints ``jax (0.10.2)`` then ``Available versions: 0.10.2, 0.10.1, ...`` (newest first),
    plus warnings; only the ``Available versions`` line counts.
    """
    match = _AVAILABLE.search(output)
    if match is None:
        last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
        raise VersionListError(
            f"pip listed no {package} releases ({last}); check pip's index configuration, "
            "or give the releases offline: --versions 0.7.2,0.8.0,0.8.1"
        )
    found = [v.strip() for v in match.group("versions").split(",") if v.strip()]
    return jax_versions.sort_versions([v for v in found if _RELEASE.match(v)])


def parse_offline(text: str) -> list[str]:
    """``--versions 0.7.2,0.8.0,0.8.1`` -> those releases, oldest first; one line on a bad entry."""
    versions = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in versions if not _RELEASE.match(v)]
    if bad or not versions:
        what = f"{bad[0]!r} is not a release number" if bad else "the list is empty"
        raise VersionListError(
            f"--versions: {what}; write releases separated by commas, e.g. 0.7.2,0.8.0,0.8.1"
        )
    return jax_versions.sort_versions(list(dict.fromkeys(versions)))


def index_versions(
    package: str = "jax", run: Callable[..., subprocess.CompletedProcess] = subprocess.run
) -> list[str]:
    """The package's final releases on the configured index, oldest first (``pip index versions``),
    as the newest Python of the version table sees them: pip lists only the releases the given
    Python installs, and jax 0.11 or tokamax 0.0.13 on need 3.12, whatever runs the bisection."""
    command = [sys.executable, "-m", "pip", "index", "versions", package, "--python-version", NEWEST_PYTHON]
    try:
        done = run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VersionListError(
            f"`pip index versions {package}` did not run ({exc}); give the releases offline: --versions a,b,c"
        ) from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
        cause = next((line for line in reversed(lines) if line.lower().startswith("error")), None)
        raise VersionListError(
            f"`pip index versions {package}` failed ({cause or (lines[-1] if lines else 'no output')}); "
            "check pip's index configuration, or give the releases offline: --versions a,b,c"
        )
    return parse_pip_index(done.stdout, package)


def between(versions: Sequence[str], a: str, b: str) -> list[str]:
    """The releases from the older of ``a``/``b`` to the newer, both included, oldest first."""
    low, high = sorted((jax_versions.version_key(a), jax_versions.version_key(b)))
    return [
        v for v in jax_versions.sort_versions(list(versions)) if low <= jax_versions.version_key(v) <= high
    ]

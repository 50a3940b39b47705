"""Where the Python a release needs lives on this machine: nox must never skip a session (exit 0, a
false green) or try to download CPython because ``python3.12`` on PATH is a pyenv shim that fails.

Looked for, in order: the interpreter running nox, pyenv's installed versions
(``$PYENV_ROOT/versions/X.Y.*``, newest patch first), ``pythonX.Y`` on PATH (run, not just found: a
pyenv shim for a version that is not pyenv's current one exists on PATH and fails) and uv's managed
ones (``uv python find --no-python-downloads``, which never downloads). Each candidate is run once to
confirm its version; pyenv's folders come before PATH because a shim costs a second to fail.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from versions.table import release_number


def _reports(python: str, minor: str) -> bool:
    """Whether the interpreter at ``python`` runs and is Python ``minor`` (``"3.12"``)."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == minor


def _pyenv_pythons(minor: str, environ: Mapping[str, str]) -> Iterator[str]:
    root = Path(environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = sorted(root.glob(f"{minor}.*/bin/python{minor}"), key=lambda p: release_number(p.parts[-3]))
    yield from (str(path) for path in reversed(found))


def _uv_python(minor: str) -> Iterator[str]:
    uv = shutil.which("uv")
    if uv is None:
        return
    try:
        done = subprocess.run(
            [uv, "python", "find", "--no-python-downloads", minor], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return
    if done.returncode == 0 and done.stdout.strip():
        yield done.stdout.strip()


def candidates(minor: str, environ: Mapping[str, str] = os.environ) -> Iterator[str]:
    """Interpreters that may be Python ``minor``, most likely first."""
    if "{}.{}".format(*sys.version_info[:2]) == minor:
        yield sys.executable
    yield from _pyenv_pythons(minor, environ)
    on_path = shutil.which(f"python{minor}", path=environ.get("PATH"))
    if on_path:
        yield on_path
    yield from _uv_python(minor)


@functools.cache
def find_python(minor: str) -> str | None:
    """The path of a working Python ``minor`` on this machine, or None (``missing_python`` says why)."""
    running = "{}.{}".format(*sys.version_info[:2]) == minor
    return next(
        (p for p in candidates(minor) if (running and p == sys.executable) or _reports(p, minor)), None
    )


def missing_python(minor: str, why: str) -> str:
    """One line: which Python is needed, for what, and how to get it."""
    return (
        f"{why} needs Python {minor}, found neither on PATH, nor under pyenv, nor by uv; "
        f"install it (`pyenv install {minor}` or `uv python install {minor}`) and rerun"
    )

"""Finding the Python a release needs: never a skipped session, never a download."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from versions import interpreters

ROOT = Path(__file__).resolve().parents[2]


def test_the_running_python_is_found_for_its_own_version():
    minor = "{}.{}".format(*sys.version_info[:2])
    found = interpreters.find_python(minor)
    assert found is not None
    done = subprocess.run(
        [found, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    assert done.stdout.strip() == str(tuple(sys.version_info[:2]))


def test_pyenv_versions_are_found_newest_patch_first_and_a_failing_shim_is_not_a_python(tmp_path):
    versions = tmp_path / "pyenv" / "versions"
    for patch in ("3.98.2", "3.98.10"):
        (versions / patch / "bin").mkdir(parents=True)
        (versions / patch / "bin" / "python3.98").write_text("")
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "python3.98"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.98: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    environ = {"PYENV_ROOT": str(tmp_path / "pyenv"), "PATH": str(shims)}
    found = list(interpreters.candidates("3.98", environ))
    assert found[:3] == [
        str(versions / "3.98.10" / "bin" / "python3.98"),
        str(versions / "3.98.2" / "bin" / "python3.98"),
        str(shim),
    ]
    assert not interpreters._reports(str(shim), "3.98")  # found on PATH, yet it does not run


def test_a_missing_python_is_one_line_naming_it_and_the_fix():
    assert interpreters.find_python("3.99") is None
    line = interpreters.missing_python("3.99", "jax 9.9.9")
    assert "\n" not in line
    assert "jax 9.9.9 needs Python 3.99" in line and "pyenv install 3.99" in line


def _nox_python() -> str | None:
    """The interpreter that has nox (its script's shebang), or None."""
    nox = shutil.which("nox")
    if nox is None:
        return None
    first = Path(nox).read_bytes().split(b"\n", 1)[0].decode(errors="replace")
    python = first[2:].strip() if first.startswith("#!") else ""
    return python if python and "python" in Path(python).name and Path(python).exists() else None


@pytest.mark.skipif(_nox_python() is None, reason="nox is not installed as a script of a Python here")
def test_a_session_whose_python_is_missing_fails_in_one_line_and_never_skips(tmp_path):
    """No Python 3.12 anywhere (empty HOME and PYENV_ROOT, PATH without pyenv's shims): the 3.12
    session fails, exit 1, naming the Python; nox's default would skip it and exit 0."""
    python = _nox_python()
    environ = {
        "PATH": os.pathsep.join([str(Path(python).parent), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path),
        "PYENV_ROOT": str(tmp_path / "pyenv"),
    }
    if subprocess.run(
        [
            python,
            "-c",
            "import sys; sys.path.insert(0, '.'); from versions import interpreters as i; "
            "raise SystemExit(i.find_python('3.12') is not None)",
        ],
        cwd=ROOT,
        env=environ,
        capture_output=True,
    ).returncode:
        pytest.skip("a Python 3.12 is reachable even without pyenv and HOME (e.g. /usr/bin/python3.12)")
    done = subprocess.run(
        [python, "-m", "nox", "--envdir", str(tmp_path / "env"), "-s", "conformance(jax='0.12.0.1')"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    aborted = [line for line in done.stderr.splitlines() if "aborted" in line]
    assert len(aborted) == 1, done.stderr[-2000:]
    assert "jax 0.12.0.1 needs Python 3.12" in aborted[0]
    assert "skipped" not in done.stderr.lower() and "Traceback" not in done.stderr

"""The one way the tests run the suite: ``python -m conformance`` in a subprocess, from the
checkout, the way a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOYS = "tests.support.toy_subjects"
# A handful of small float32 toy cases: enough for every check, quick in a subprocess.
SMALL = "float32 and (Sq128-Sk128-D64 or lenkv128.0) and not Dv"


def toy(name: str) -> str:
    """The ``--impl`` path of a subject in ``tests/support/toy_subjects.py``."""
    return f"{TOYS}:{name}"


def suite_command(
    report_dir: Path,
    impl: str,
    *args: str,
    shrink: bool = False,
    junit: bool = False,
    isolated: bool = False,
    plots: bool = False,
) -> list[str]:
    """The command line of a quiet run of ``impl`` into ``report_dir``; ``args`` go last.

    What a test is not about stays off, since each costs seconds a run: shrinking (it only
    slows a failing run down), the report's plot (``plots``), and worker processes
    (``isolated``: one xdist worker, as a user's run has; otherwise ``-n 0``, one process,
    since each worker imports JAX anew and the tests already run one per core). ``args``
    that choose workers win. ``junit`` also writes ``report_dir/junit.xml``."""
    command = [sys.executable, "-m", "conformance", "--impl", impl, "--report-dir", str(report_dir), "-q"]
    if not any(a.startswith(("-n", "--numprocesses", "no:xdist", "-pno:xdist")) for a in args):
        command += ["-n", "1" if isolated else "0"]
    if not plots:
        command.append("--no-plots")
    if not shrink:
        command.append("--no-shrink")
    if junit:
        command.append(f"--junitxml={report_dir / 'junit.xml'}")
    return [*command, *args]


def child_environment() -> dict[str, str]:
    """This process's environment, less what makes a child pytest think it is an xdist worker.

    Under ``nox -s tests`` (``-n 2``) each worker has ``PYTEST_XDIST_WORKER`` set, and a child
    inherits it: pytest-benchmark then turns itself off in the child and writes no JSON."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}


def run_suite(
    report_dir: Path,
    impl: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    **options: bool,
) -> subprocess.CompletedProcess:
    """Runs ``suite_command`` from the checkout and returns it finished, output captured.

    ``options``: ``suite_command``'s (shrink, junit, isolated, plots). ``env`` replaces the
    environment (None: this process's, as a child sees it: ``child_environment``); ``timeout``
    fails a hung run."""
    return subprocess.run(
        suite_command(report_dir, impl, *args, **options),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_environment() if env is None else env,
    )

"""The real installer and runner that ``reports.bisection.search`` searches with.

A bisection walks one library (``Walk``): JAX releases, or tokamax releases at a fixed jax. A step's
environment and report folder are the (jax, tokamax) pair's: ``conformance(jax='0.10.2',
tokamax='0.0.11')``, ``.nox/conformance-jax-0-10-2-tokamax-0-0-11``, ``OUT/jax-0.10.2-tokamax-0.0.11/``.

* **Install**: nox's own ``conformance(jax='X')`` session with ``--install-only``, so a version
  gets exactly the matrix's environment (``install_project``: pyproject's dependencies, the
  test group and ``reports/jax_versions.py``'s pins), in the same folder
  (``.nox/conformance-jax-X-Y-Z``), reused when it is already there (``-r``). Then JAX must
  import, at that version.
* **Run**: the suite's own run in that environment, narrowed to one test id
  (``conformance/test_checks.py::test_<check>[<case id>]``) with the matrix's isolation
  defaults, into a report folder of its own; the verdict and worst ratio come from that
  run's results.jsonl.

Stdlib only (nox and the suite run as subprocesses).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from conformance.suite.launch import isolated_args
from reports import jax_versions
from reports.bisection.search import Install, Observation
from run_records.results_file import ResultsFileError, read_results, write_text_atomic
from versions import table

ROOT = Path(__file__).resolve().parents[2]  # the checkout
INSTALL_TIMEOUT_S = 3600
RUN_TIMEOUT_S = 7200
_NOX_ABORT = re.compile(r"Session \S+ (?:aborted|failed): (?P<reason>.*)$")


def env_name(version: str, tokamax: str | None = None) -> str:
    """nox's folder name for ``conformance(jax='0.8.3')``: ``conformance-jax-0-8-3``; with a tokamax
    release, ``conformance(jax='0.10.2', tokamax='0.0.11')``: ``conformance-jax-0-10-2-tokamax-0-0-11``."""
    name = "conformance-jax-" + version.replace(".", "-")
    return name if tokamax is None else f"{name}-tokamax-{tokamax.replace('.', '-')}"


def env_python(envdir: Path, version: str, tokamax: str | None = None) -> Path:
    return envdir / env_name(version, tokamax) / "bin" / "python"


LIBRARIES = tuple(library.name for library in table.LIBRARIES)


@dataclasses.dataclass(frozen=True)
class Walk:
    """The library a bisection walks: ``jax`` releases, or ``tokamax`` releases at the fixed ``jax``.
    A step's version is a release of ``library``; ``pair`` gives the (jax, tokamax) it runs with."""

    library: str = "jax"
    jax: str | None = None  # the jax held fixed while tokamax releases are walked

    def __post_init__(self) -> None:
        if self.library not in LIBRARIES:
            raise ValueError(f"--library {self.library!r}: walk one of {', '.join(LIBRARIES)}")
        if (self.library == "tokamax") != (self.jax is not None):
            raise ValueError("a tokamax walk holds one jax fixed (--jax X); a jax walk takes none")

    def pair(self, version: str) -> tuple[str, str | None]:
        return (version, None) if self.jax is None else (self.jax, version)

    def session(self, version: str) -> str:
        """nox's session: ``conformance(jax='0.8.3')`` or ``conformance(jax='0.10.2', tokamax='0.0.11')``."""
        return f"{jax_versions.SESSION}({jax_versions.session_id(*self.pair(version))})"

    def folder(self, version: str) -> str:
        """The step's report folder name: ``jax-0.8.3`` or ``jax-0.10.2-tokamax-0.0.11``."""
        return Path(jax_versions.report_folder(*self.pair(version))).name

    def describe(self, version: str) -> str:
        """``jax 0.8.3`` or ``tokamax 0.0.11 (jax 0.10.2)``, for a step's line and messages."""
        return f"jax {version}" if self.jax is None else f"tokamax {version} (jax {self.jax})"


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


@dataclasses.dataclass(frozen=True)
class NoxInstaller:
    """Makes ``envdir/conformance-jax-X`` ready through ``nox -s "conformance(jax='X')" --install-only``
    (for a tokamax walk, ``conformance(jax='X', tokamax='Y')``'s environment).

    nox: the command that runs nox (the nox session passes its own interpreter's).
    logs: where each version's installer output goes (``jax-X-install.log``).
    """

    nox: tuple[str, ...]
    envdir: Path
    logs: Path
    root: Path = ROOT
    walk: Walk = Walk()

    def __call__(self, version: str) -> Install:
        jax, tokamax = self.walk.pair(version)
        problem = tokamax and jax_versions.tokamax_problem(tokamax, jax)
        if problem:  # the table forbids the pair: nothing to install, the step is skipped
            return Install(False, False, problem)
        python = env_python(self.envdir, jax, tokamax)
        fresh = not python.exists()
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{self.walk.folder(version)}-install.log"
        command = [
            *self.nox,
            "--noxfile",
            str(self.root / "noxfile.py"),
            "--envdir",
            str(self.envdir),
            "--reuse-venv=yes",
            "--install-only",
            "-s",
            self.walk.session(version),
        ]
        start = time.monotonic()
        try:
            done = subprocess.run(
                command, cwd=self.root, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return Install(
                False, fresh, f"the install ran past {INSTALL_TIMEOUT_S} s", time.monotonic() - start
            )
        output = done.stdout + done.stderr
        write_text_atomic(log, output)
        if done.returncode != 0:
            reasons = [m.group("reason") for m in map(_NOX_ABORT.search, output.splitlines()) if m]
            reason = reasons[-1] if reasons else f"nox exited {done.returncode}: {_tail(output)}"
            return Install(False, fresh, f"{reason} (log: {log})", time.monotonic() - start)
        problem = import_problem(python, jax, tokamax)
        return Install(problem is None, fresh, problem or "", time.monotonic() - start)


def import_problem(python: Path, version: str, tokamax: str | None = None) -> str | None:
    """Why JAX (and tokamax, when given) does not import at that version in that interpreter, or None."""
    probe = "import jax, jaxlib; print(jax.__version__)"
    what = f"jax {version}"
    if tokamax is not None:
        probe = (
            "import importlib.metadata, jax, jaxlib, tokamax; "
            "print(jax.__version__, importlib.metadata.version('tokamax'))"
        )
        what = f"tokamax {tokamax} with jax {version}"
    try:
        done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{what} does not import: {exc}"
    if done.returncode != 0:
        return f"{what} does not import: {_tail(done.stderr)}"
    found = _tail(done.stdout).split()
    expected = [version] if tokamax is None else [version, tokamax]
    if found != expected:
        held, wanted = (" with tokamax ".join(v) or "nothing" for v in (found, expected))
        return f"the environment holds jax {held}, not {wanted}; delete it to have it rebuilt"
    return None


@dataclasses.dataclass(frozen=True)
class SuiteRunner:
    """Runs one check of one case with the suite at a version; its verdict and worst ratio.

    out: the bisection's folder; each version's run writes ``out/jax-X/`` (``out/jax-X-tokamax-Y/``
    for a tokamax walk; replaced each time) and its output to ``out/logs/jax-X-run.log``.
    pytest_args: more options for the run (``--known-issues FILE``, ``--hypothesis-seed N``, ...).
    """

    envdir: Path
    impl: str
    case_id: str
    check: str
    out: Path
    profile: str = "ci"
    pytest_args: tuple[str, ...] = ()
    root: Path = ROOT
    walk: Walk = Walk()

    def test_id(self) -> str:
        return f"conformance/test_checks.py::test_{self.check}[{self.case_id}]"

    def command(self, version: str) -> list[str]:
        jax, tokamax = self.walk.pair(version)
        env = self.envdir / env_name(jax, tokamax)
        given = ["--profile", self.profile, *self.pytest_args]
        return [
            str(env_python(self.envdir, jax, tokamax)),
            "-m",
            "pytest",
            self.test_id(),
            "-p",
            "no:cacheprovider",
            "--impl",
            self.impl,
            "--report-dir",
            str(self.out / self.walk.folder(version)),
            f"--jax-cache-dir={env / 'jax-cache'}",
            "--no-shrink",  # the verdict is all bisect needs; shrinking a failure costs minutes
            "--no-progress",
            "--no-plots",  # nobody reads the plot of a one-check run
            # One check: a second worker would only import JAX and wait (a later -n of the user's wins).
            *isolated_args(["-n", "1", *given]),
        ]

    def __call__(self, version: str) -> Observation:
        report = self.out / self.walk.folder(version)
        if report.exists():
            shutil.rmtree(report)  # this bisection's own folder from an earlier step or run
        logs = self.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        try:
            done = subprocess.run(
                self.command(version), cwd=self.root, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
            )
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            output = f"{exc.stdout or ''}{exc.stderr or ''}\nthe run passed {RUN_TIMEOUT_S} s"
        seconds = time.monotonic() - start
        write_text_atomic(logs / f"{self.walk.folder(version)}-run.log", output)
        return observe(report, self.case_id, self.check, output, seconds, self.describe(version))

    def describe(self, version: str) -> str:
        return (
            f"check {self.check} of case {self.case_id} (--impl {self.impl}, profile {self.profile}) "
            f"at {self.walk.describe(version)}"
        )


def observe(report: Path, case_id: str, check: str, output: str, seconds: float, what: str) -> Observation:
    """The record for (case_id, check) in ``report``'s results.jsonl; verdict None when there is none."""
    try:
        records = read_results(report).results
    except ResultsFileError:
        records = ()
    record = next((r for r in records if r.case.case_id == case_id and r.check == check), None)
    if record is None:
        cause = "not found" if "not found" in output else _tail(output)
        return Observation(
            None,
            None,
            f"no result for {what} ({cause}); copy the case id from a results.jsonl "
            "of that subject and profile",
            seconds,
            str(report),
        )
    ratios = [m.ratio for m in record.metrics if m.ratio is not None and not math.isnan(m.ratio)]
    return Observation(record.verdict, max(ratios) if ratios else None, record.reason, seconds, str(report))


def nox_command(given: Sequence[str] | None) -> tuple[str, ...]:
    """The command that runs nox: the one given, else ``nox`` on PATH."""
    if given:
        return tuple(given)
    found = shutil.which("nox")
    if found is None:
        raise FileNotFoundError(
            "nox is not on PATH; run `nox -s bisect -- ...`, or pass --nox 'python -m nox'"
        )
    return (found,)

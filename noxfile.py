"""nox sessions: one per job, one environment per JAX version.

    nox -s tests                          # the project's own tests (newest JAX)
    nox -s conformance                    # the conformance suite at the newest JAX
    nox -s "conformance(jax='0.4.38')"    # ... at any JAX version, listed or not -> reports/jax-0.4.38/
    nox -s "conformance(jax='0.9.2', tokamax='0.0.11')"  # with a tokamax: reports/jax-0.9.2-tokamax-0.0.11/
    nox -k conformance                    # ... at every version of the matrix
    nox -s "bench(jax='0.4.38')"          # subject benchmarks -> reports/jax-0.4.38/benchmarks.json
    nox -s perf                           # the suite's own speed: cold/warm runs, time split (10-20 min)
    nox -s "kernels(jax='0.4.35')"        # the adapters' tests at one JAX version (`-k kernels`: all)
    nox -s torch                          # the adapters' tests with the optional PyTorch subject
    nox -s matrix                         # one report over all reports/jax-*/ -> reports/matrix/
    nox -s gate -- BASE CANDIDATE         # upgrade verdict; exits non-zero on a regression
    nox -s merge -- OUT SHARD1 SHARD2 ... # the folders of one `--shard K/N` run as one folder
    nox -s bisect -- --impl S --case ID --good X --bad Y  # first release where a check fails (or is fixed)
    nox -s bisect -- --library tokamax --jax 0.10.2 --impl S --case ID --good 0.0.10 --bad 0.0.12

The libraries, their releases, the pins and the Python each release needs live in
versions/table.py; reports/jax_versions.py holds the rules by which this file reads its own
command line (a bare `conformance` means the newest version only; a version named on the
command line is added). Each session gets the Python its releases need (jax 0.11 and tokamax
0.0.13 on: 3.12), found on PATH, under pyenv or by uv (versions/interpreters.py); a missing one
fails the session in one line, never a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the checkout's reports/, whatever nox's cwd
from benchmarks.sessions import bench_versions  # noqa: E402  (jax_versions' rules, for `bench`)
from conformance.suite.launch import isolated_args  # noqa: E402  (worker process, per-test timeout)
from reports import jax_versions  # noqa: E402
from versions import interpreters  # noqa: E402

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["tests"]
# A session whose Python is missing fails (nox's default skips it and exits 0: a false green), and
# nox never downloads an interpreter (offline machines; versions/interpreters.py finds installed ones).
nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"

PYPROJECT = nox.project.load_toml("pyproject.toml")
NEWEST_JAX = jax_versions.NEWEST
# The newest JAX that runs on the oldest Python of the table: what the torch session installs (the
# PyTorch CPU wheel on this machine kind is for Python 3.11 only).
TORCH_JAX = max(
    (
        v
        for v in jax_versions.MATRIX
        if jax_versions.python_for(v) == jax_versions.python_for(jax_versions.MATRIX[0])
    ),
    key=jax_versions.version_key,
)
# Stdlib tools (lint, gate, merge, matrix, bisect) run on the Python that runs nox.
TOOLS_PYTHON = sys.executable


def python_of(jax: str, tokamax: str | None = None) -> str | bool:
    """The interpreter path for the Python (jax, tokamax) needs; False (no environment: the session
    then fails in one line, ``needs_python``) when this machine has none. A version that is not a
    release number gets nox's own Python: its session then ends on ``version_problem``'s line."""
    if jax_versions.version_problem(jax) or (tokamax and jax_versions.tokamax_problem(tokamax, jax)):
        return TOOLS_PYTHON
    return interpreters.find_python(jax_versions.python_for(jax, tokamax)) or False


def needs_python(session: nox.Session, jax: str, tokamax: str | None = None) -> None:
    """End a session whose Python is missing, in one line naming it and how to get it."""
    if session.python is False:
        what = f"jax {jax}" + (f" with tokamax {tokamax}" if tokamax else "")
        session.error(interpreters.missing_python(jax_versions.python_for(jax, tokamax), what))


CONFORMANCE_PAIRS = jax_versions.session_pairs(sys.argv[1:], os.environ)  # (jax, tokamax or None)
BENCH_VERSIONS = bench_versions(sys.argv[1:], os.environ)
KERNELS_VERSIONS = jax_versions.session_versions(sys.argv[1:], os.environ, session="kernels")


def install_project(
    session: nox.Session,
    jax_version: str = NEWEST_JAX,
    groups: tuple[str, ...] = ("test",),
    tokamax: str | None = None,
) -> None:
    """Install the project's dependencies (not the project: it runs from the checkout).

    An unknown or uninstallable JAX version ends the session with one line naming
    the problem and the fix; the installer's full output stays in the session's tmp/.
    ``tokamax``: a tokamax release to install instead of the one this JAX gets by default.
    """
    problem = jax_versions.version_problem(jax_version) or (
        tokamax and jax_versions.tokamax_problem(tokamax, jax_version)
    )
    if problem:
        session.error(problem)
    needs_python(session, jax_version, tokamax)
    requirements = [r for r in PYPROJECT["project"]["dependencies"] if not r.startswith("jax")]
    for group in groups:
        requirements += nox.project.dependency_groups(PYPROJECT, group)
    # tokamax (the tokamax subjects): the release named, else the pyproject pin at the newest JAX, else
    # the newest release this JAX takes (none before 0.8.2: those subjects then say they are unavailable).
    if tokamax:
        libraries = (f"tokamax=={tokamax}",)
    elif jax_version == NEWEST_JAX:
        libraries = tuple(nox.project.dependency_groups(PYPROJECT, "tokamax"))
    else:
        libraries = jax_versions.tokamax_requirements(jax_version)
    requirements = list(
        dict.fromkeys([*requirements, *jax_versions.requirements_for(jax_version), *libraries])
    )
    # Bytecode, written once: uv writes none unless asked, and a machine that sets
    # PYTHONDONTWRITEBYTECODE (CI machines of this kind do) stops Python writing any. Every process
    # would then compile JAX's and the suite's sources again: about 5 s each on 2 cores, and a
    # run starts 2 or 3 (controller, workers), the tests a hundred.
    session.env["PYTHONDONTWRITEBYTECODE"] = ""  # empty is unset, for this session's processes
    log_path = Path(session.create_tmp()) / "install.log"
    with log_path.open("w", encoding="utf-8") as log:
        try:
            session.install(
                *requirements,
                silent=False,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={"UV_COMPILE_BYTECODE": "1"},
            )
        except nox.command.CommandFailed:
            log.flush()
            output = log_path.read_text(encoding="utf-8", errors="replace")
            session.error(f"{jax_versions.install_failure(jax_version, output)} (log: {_relative(log_path)})")


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path.name


@nox.session(python=TOOLS_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: the lint rules and the formatter, both configured in pyproject.toml."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=python_of(NEWEST_JAX, jax_versions.tokamax_for(NEWEST_JAX)))
def tests(session: nox.Session) -> None:
    """The project's own tests: reference, adapters, checks, mutants, reports."""
    install_project(session)
    # Tests that install JAX releases into fresh environments are opt-in: `nox -s tests -- -m slow`.
    # Two worker processes, one per core of the CI machine: most tests are single-threaded (a
    # serial run's CPU time equals its wall time). Whole files go to one worker (loadfile), so a
    # module's session-scoped suite run (the mutation meta-test's) happens once, not once per worker.
    # The 25 slowest tests are listed: the run is close to its 15-minute budget, and CI's log says
    # which test grew.
    default = ("-m", "not slow", "-n", "2", "--dist", "loadfile", "--durations=25")
    session.run("pytest", *(session.posargs or default))


@nox.session
@nox.parametrize(["python", "jax"], [nox.param(python_of(v), v, id=f"jax='{v}'") for v in KERNELS_VERSIONS])
def kernels(session: nox.Session, jax: str) -> None:
    """The adapters' own tests at one JAX version: availability and unavailability (why) per subject."""
    install_project(session, jax)
    session.run("pytest", "tests/kernels", *session.posargs)


@nox.session(python=python_of(TORCH_JAX), venv_backend="virtualenv")
def torch(session: nox.Session) -> None:
    """The adapters' tests with the optional PyTorch subject (CPU build), at the newest JAX of Python
    3.11. pip, not uv: pip honours the machine's pip configuration (find-links, constraints), which is
    where a local CPU wheel lives."""
    install_project(session, TORCH_JAX, groups=("test", "torch"))
    session.run("pytest", "tests/kernels", *session.posargs)


@nox.session
@nox.parametrize(
    ["python", "jax", "tokamax"],
    [nox.param(python_of(j, t), j, t, id=jax_versions.session_id(j, t)) for j, t in CONFORMANCE_PAIRS],
)
def conformance(session: nox.Session, jax: str, tokamax: str | None) -> None:
    """The conformance suite at one JAX version -> reports/jax-<version>/ (results.jsonl, summary.json,
    junit.xml). Default subject: the primary one; `-- --impl all` (or a name, or package.module:function).
    `conformance(jax='X', tokamax='Y')` installs that tokamax release too -> reports/jax-X-tokamax-Y/."""
    install_project(session, jax, tokamax=tokamax)
    report_dir = jax_versions.report_folder(jax, tokamax)
    # JAX's persistent compilation cache lives with the environment: a rerun skips XLA compiles.
    jax_cache = Path(session.virtualenv.location) / "jax-cache"
    session.run(
        "python",
        "-m",
        "pytest",
        "conformance",
        "-p",
        "no:cacheprovider",
        "--report-dir",
        report_dir,
        f"--junitxml={report_dir}/junit.xml",
        f"--jax-cache-dir={jax_cache}",
        *isolated_args(session.posargs),
    )  # -n <usable cores>, --max-worker-restart, --timeout unless given


@nox.session
@nox.parametrize(["python", "jax"], [nox.param(python_of(v), v, id=f"jax='{v}'") for v in BENCH_VERSIONS])
def bench(session: nox.Session, jax: str) -> None:
    """Subject benchmarks at one JAX version -> reports/jax-<version>/benchmarks.json (pytest-benchmark
    JSON; the gate reads it). Interpreted kernels get the short `interpret` shape list (benchmarks/)."""
    install_project(session, jax)
    report_dir = Path(f"reports/jax-{jax}")
    report_dir.mkdir(parents=True, exist_ok=True)  # pytest-benchmark opens the JSON file at start-up
    session.run(
        "python",
        "-m",
        "pytest",
        "benchmarks",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={report_dir / 'benchmarks.json'}",
        *session.posargs,
    )


@nox.session(python=python_of(NEWEST_JAX, jax_versions.tokamax_for(NEWEST_JAX)))
def perf(session: nox.Session) -> None:
    """The suite's own speed: cold and warm `--impl all` ci runs, the time split (subject,
    reference, baseline, harness) and the reference's GFLOP/s ratio, as a table. 10-20 minutes.
    `-- --impl xla --workers 0 -- -k float32` narrows it (options: python -m benchmarks.suite_speed -h)."""
    install_project(session)
    out = Path(session.create_tmp()) / "perf"
    session.run("python", "-m", "benchmarks.suite_speed", "--out", str(out), *session.posargs)


@nox.session(python=TOOLS_PYTHON)
def matrix(session: nox.Session) -> None:
    """One report over every reports/jax-*/ present: subject x version, ratio drift -> reports/matrix/."""
    session.install(*[r for r in PYPROJECT["project"]["dependencies"] if r.startswith("matplotlib")])
    session.run("python", "-m", "reports", "matrix", "reports", *session.posargs)


@nox.session(python=TOOLS_PYTHON)
def gate(session: nox.Session) -> None:
    """Upgrade verdict: `nox -s gate -- BASE CANDIDATE [--ratio-drift 0.5 ...]` (stdlib only, no installs)."""
    if len([a for a in session.posargs if not a.startswith("-")]) < 2:
        session.error("give two report folders: nox -s gate -- reports/jax-OLD reports/jax-NEW")
    session.run("python", "-m", "reports", "gate", *session.posargs)


@nox.session(python=TOOLS_PYTHON)
def merge(session: nox.Session) -> None:
    """One folder from the shards of a `--shard K/N` run: `nox -s merge -- OUT IN1 IN2 ...` (stdlib only,
    no installs); it renders, gates and joins the matrix like an unsharded run's folder."""
    if len([a for a in session.posargs if not a.startswith("-")]) < 2:
        session.error("give the output folder and the shard folders: nox -s merge -- OUT SHARD1 SHARD2 ...")
    session.run("python", "-m", "reports", "merge", "--no-plots", *session.posargs)


@nox.session(python=TOOLS_PYTHON)
def bisect(session: nox.Session) -> None:
    """First JAX release where one check of one case starts (or stops) failing:
    `nox -s bisect -- --impl SUBJECT --case CASE_ID [--check forward] --good X --bad Y
    [--versions a,b,c] [--known-issue ID]`. Each release gets the `conformance(jax='X')` environment
    (.nox/, reused); -> reports/bisect/bisect.json. `--library tokamax --jax 0.10.2` walks tokamax
    releases at that jax instead (`conformance(jax='0.10.2', tokamax='Y')` each; --known-issue edits
    the entry's tokamax range). Options: python -m reports bisect -h."""
    flags = {a.split("=")[0] for a in session.posargs}
    missing = [f for f in ("--impl", "--case", "--good", "--bad") if f not in flags]
    if missing and not flags & {"-h", "--help"}:
        session.error(
            f"give {', '.join(missing)}: nox -s bisect -- --impl xla --case CASE_ID --good X --bad Y"
        )
    # pip lists the releases from the index pip is configured with; packaging compares versions.
    session.install("pip", "packaging")
    nox_command = f"{sys.executable} -m nox"  # this very nox, to build each version's environment
    session.run("python", "-m", "reports", "bisect", "--nox", nox_command, *session.posargs)

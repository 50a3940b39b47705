"""Process isolation: a subject that crashes, hangs or exhausts memory costs one case, not the run.

The mechanism is pytest-xdist and pytest-timeout (``conformance/launch.py`` turns
them on); this module only makes their outcome *say what happened*:

* xdist runs the checks in a worker process, reused until it dies; a dead worker
  is replaced and xdist reports the test it was running as crashed.
* pytest-timeout's ``--timeout`` is the per-test limit. In a worker its timer is
  faulthandler's watchdog (``pytest_timeout_set_timer``): a C thread that needs no
  GIL, so it also ends a kernel hung inside C code that holds the GIL, which the
  ``signal`` and ``thread`` methods cannot. It writes the stacks and exits the worker.
* ``--worker-memory-limit`` sets RLIMIT_DATA in each worker: an allocation past it
  fails in that worker (MemoryError, or an abort in C++) before the kernel's OOM
  killer picks a victim on a shared machine. Data, not address space: CUDA and
  XLA reserve terabytes of address space they never touch.
* ``--jax-cache-dir DIR`` (``conformance/plugin.py``) is JAX's persistent compilation
  cache: every worker turns it on, so a replacement recompiles nothing its predecessor did.

Each worker keeps a *last-words* file that faulthandler writes into (the fatal
signal or the timeout, and the Python stacks). When xdist reports a crash, the
controller reads it and the exit status, writes the case's record (verdict
``error``, with its features so it shows in the report grid) and lists the case
in ``faults.json``: the case's remaining checks are then reported from that
line without calling the subject again.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import math
import os
import resource
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance import recording, repro
from conformance.catalogue import Planned
from conformance.runner import describe
from reports.records import CaseResult, write_json_atomic

PLUGIN_NAME = "conformance-isolation"
DIR_KEY = "conformance_isolation_dir"
MEMORY_KEY = "conformance_worker_memory"
FAULTS_FILE = "faults.json"
_CRASH_WAIT_S = 2.0  # how long the controller waits for a dead worker's exit status


def add_options(group: Any) -> None:
    group.addoption("--worker-memory-limit", default="auto", metavar="SIZE",
                    help="data-segment limit of each worker process, e.g. 8G or 512M; 0 for none. "
                         "Default 'auto': 80%% of the machine's memory")


def parse_size(text: str) -> int:
    """'8G', '512M', '1.5g', '1000000' -> bytes; 'auto' -> 80% of physical memory; '0' -> 0 (no limit)."""
    given, text = str(text).strip(), str(text).strip().lower()
    if text == "auto":
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    number = text.removesuffix("b").removesuffix("i")  # 8G, 8GB and 8GiB all mean 8 * 2**30
    factor = units.get(number[-1:], 1)
    number = number[:-1] if number[-1:] in units else number
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 0):
        raise pytest.UsageError(
            f"--worker-memory-limit {given!r} is not a size; write e.g. 8G, 512M or 0 (no limit)")
    return int(value * factor)


def planned_features(planned: Planned) -> tuple[str, ...]:
    """The grid columns a record of ``planned`` counts towards (as ``Runner.evaluate`` sets them)."""
    return (planned.check, planned.case.dtype, *planned.case.features)


def _planned_of(item: Any) -> Planned | None:
    planned = getattr(getattr(item, "callspec", None), "params", {}).get("planned")
    return planned if isinstance(planned, Planned) else None


@dataclasses.dataclass(frozen=True)
class Crash:
    """Why a worker died: its exit status (None if unknown) and its last words (may be empty)."""

    returncode: int | None
    last_words: str
    seconds: float | None
    timeout: float | None = None  # the --timeout in force, if any

    def explain(self) -> str:
        """One headline, then the innermost stack lines the worker left."""
        words = self.last_words
        after = f" after {self.seconds:.1f} s" if self.seconds is not None else ""
        if words.startswith("Timeout ("):
            limit = f"--timeout {self.timeout:g} s" if self.timeout else "--timeout"
            head = f"timed out: still running{after} ({limit}), so the worker was stopped and replaced"
        elif self.returncode is not None and self.returncode < 0:
            head = f"the worker process was killed by {_signal_name(-self.returncode)}{after}"
        elif "Fatal Python error:" in words:
            what = words.split("Fatal Python error:", 1)[1].splitlines()[0].strip()
            head = f"the worker process died: {what}{after}"
        elif self.returncode is not None:
            head = f"the worker process exited with status {self.returncode}{after}"
        else:
            head = f"the worker process died{after}"
        if self.returncode == -signal.SIGKILL and not words:
            head += " and left no note (killed from outside: the kernel's out-of-memory killer?)"
        frames = _innermost_frames(words)
        return head + (f"\nlast Python frames (innermost first):\n{frames}" if frames else "")


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({signal.strsignal(number)})"
    except ValueError:
        return f"signal {number}"


def _innermost_frames(words: str, count: int = 4) -> str:
    """The innermost ``File ...`` lines of the thread that ran the test: the 'Current thread'
    for a fatal signal; for a timeout (no current thread) the one inside pytest. Paths are
    shown relative to the working folder, or with the home folder as ``~``: reports get pasted."""
    blocks = [b for b in words.replace("Current thread", "\x00Current thread").replace(
        "Thread 0x", "\x00Thread 0x").split("\x00") if "File " in b]
    chosen = next((b for b in blocks if b.startswith("Current thread")), None)
    chosen = chosen or next((b for b in blocks if "_pytest" in b), None) or (blocks[0] if blocks else "")
    frames = [line.strip() for line in chosen.splitlines() if line.strip().startswith("File ")]
    cwd, home = str(Path.cwd()) + os.sep, str(Path.home())
    return "\n".join(f.replace(cwd, "").replace(home, "~") for f in frames[:count])


# -- controller ---------------------------------------------------------------------------------------
class ControllerIsolation:
    """Controller side: hands workers their settings, explains crashes, remembers crashed cases."""

    def __init__(self, config: pytest.Config, lookup: Callable[[str, str], Planned | None],
                 spec_of: Callable[[str], str]):
        self.config = config
        self.lookup = lookup
        self.spec_of = spec_of
        self.folder = Path(tempfile.mkdtemp(prefix="conformance-workers-"))
        self.memory_limit = parse_size(config.getoption("worker_memory_limit"))
        self.started: dict[str, float] = {}
        self.faults: dict[str, str] = {}
        self.scheduled: set[str] = set()  # every test a worker collected (after deselection)
        self.finished: set[str] = set()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[DIR_KEY] = str(self.folder)
        node.workerinput[MEMORY_KEY] = self.memory_limit

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.started[nodeid] = time.monotonic()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.scheduled.update(ids)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when in ("teardown", "???"):  # "???": xdist's report of a test whose worker died
            self.finished.add(report.nodeid)

    def unfinished(self) -> int:
        """Tests scheduled but never reported: xdist gave up (--max-worker-restart) or -x stopped it."""
        return len(self.scheduled - self.finished)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        missing = self.unfinished()
        if missing:
            terminalreporter.write_line(
                f"conformance: {missing} checks never ran; results.jsonl is left incomplete: "
                "rerun with --resume (and a larger --max-worker-restart) to finish it", red=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        """Turn xdist's bare 'worker crashed' report into one that names the cause and the case."""
        worker = getattr(report, "node", None)
        worker_id = str(getattr(getattr(worker, "gateway", None), "id", "?"))
        started = self.started.get(crashitem)
        crash = Crash(_exit_status(worker), _read_last_words(self.folder, worker_id),
                      None if started is None else time.monotonic() - started,
                      self.config.getoption("timeout", default=None))
        reason = f"worker {worker_id} crashed: {crash.explain()}"
        report.longrepr = reason
        parsed = recording.parse_node_id(crashitem)
        planned = self.lookup(*parsed) if parsed else None
        if planned is None:
            return
        # The whole record, repro script included: running it shows the crash again, outside the suite.
        script = repro.script(planned.case, planned.check, self.spec_of(planned.case.subject))
        result = CaseResult(case=describe(planned.case), check=planned.check, verdict="error", reason=reason,
                            features=planned_features(planned), repro=script)
        report.user_properties = [*getattr(report, "user_properties", ()), recording.result_property(result)]
        self.faults[planned.case.case_id] = f"{planned.check}: {reason.splitlines()[0]}"
        write_json_atomic(self.folder / FAULTS_FILE, self.faults)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _exit_status(worker: Any) -> int | None:
    """The dead worker's exit status, where execnet lets us see it (else None: the
    last words still name the cause)."""
    popen = getattr(getattr(getattr(worker, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        return popen.wait(timeout=_CRASH_WAIT_S)
    except Exception:  # noqa: BLE001 - a status we cannot read is just not reported
        return None


def _last_words_path(folder: Path, worker_id: str) -> Path:
    return folder / f"{worker_id}.last-words"


def _read_last_words(folder: Path, worker_id: str) -> str:
    try:
        return _last_words_path(folder, worker_id).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


# -- worker ---------------------------------------------------------------------------------------------
class WorkerIsolation:
    """Worker side: memory limit, last-words file, GIL-free timeouts, known-crashed cases."""

    def __init__(self, config: pytest.Config):
        workerinput = config.workerinput  # type: ignore[attr-defined]
        self.folder = Path(workerinput[DIR_KEY])
        self.worker_id = str(workerinput.get("workerid", "gw"))
        limit = int(workerinput.get(MEMORY_KEY) or 0)
        if limit:
            _, hard = resource.getrlimit(resource.RLIMIT_DATA)
            if hard == resource.RLIM_INFINITY or limit < hard:
                resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        # Unbuffered: faulthandler writes to the descriptor directly, at its offset.
        self.notes = open(_last_words_path(self.folder, self.worker_id), "wb", buffering=0)  # noqa: SIM115

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any):
        self.notes.seek(0)
        self.notes.truncate()  # the file holds the current test's last words only
        # Per test, not at configure: pytest's own faulthandler plugin points it at stderr after us.
        faulthandler.enable(file=self.notes, all_threads=True)
        yield

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool:
        faulthandler.dump_traceback_later(settings.timeout, exit=True, file=self.notes)
        return True

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool:
        faulthandler.cancel_dump_traceback_later()
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> None:
        """A case that already crashed a worker is not run again: its record says why."""
        planned = _planned_of(pyfuncitem)
        if planned is None:
            return None
        fault = _known_faults(self.folder).get(planned.case.case_id)
        if fault is None:
            return None
        result = CaseResult(case=describe(planned.case), check=planned.check, verdict="error",
                            reason=f"not run: an earlier check of this case crashed its worker ({fault})",
                            features=planned_features(planned))
        pyfuncitem.user_properties.append(recording.result_property(result))
        pytest.fail(f"{planned.check} ERROR: {result.reason}", pytrace=False)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        faulthandler.cancel_dump_traceback_later()
        faulthandler.disable()
        self.notes.close()


def _known_faults(folder: Path) -> dict[str, str]:
    try:
        return json.loads((folder / FAULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def unfinished(config: pytest.Config) -> int:
    """How many scheduled tests never reported (0 without xdist: there, pytest itself stops)."""
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    return plugin.unfinished() if isinstance(plugin, ControllerIsolation) else 0


def configure(config: pytest.Config, lookup: Callable[[str, str], Planned | None],
              spec_of: Callable[[str], str]) -> None:
    """Register the side of isolation this process plays (nothing without xdist)."""
    if config.pluginmanager.get_plugin(PLUGIN_NAME) is not None:
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        if DIR_KEY in workerinput:
            config.pluginmanager.register(WorkerIsolation(config), PLUGIN_NAME)
    elif config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(ControllerIsolation(config, lookup, spec_of), PLUGIN_NAME)

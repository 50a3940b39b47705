"""Process isolation: a subject that crashes, hangs or exhausts memory costs one case, not the run.

The mechanism is pytest-xdist and pytest-timeout (``conformance/suite/launch.py`` turns
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
* ``--jax-cache-dir DIR`` (``conformance/harness/plugin.py``) is JAX's persistent compilation
  cache: every worker turns it on, so a replacement recompiles nothing its predecessor did.

Each worker keeps a *last-words* file that faulthandler writes into (the fatal
signal or the timeout, and the Python stacks). When xdist reports a crash, the
controller reads it and the exit status, writes the case's record (verdict
``error``, with its features so it shows in the report grid) and lists the case
in ``faults.json``: the case's remaining checks are then reported from that
line without calling the subject again.

XLA's compiler sometimes dies in a long run where the same case passes alone, so a
crash (or hard timeout) counts only once it happens twice: before recording it, the
controller reruns that check once in a fresh process (``retry_main``, with the same
``--timeout``, memory limit and compilation cache). Killed or timed out again: verdict
``error``, "crashed twice", as above. Ran to the end and passed: verdict ``flaky``, with
both attempts in the record; ran to the end and failed: the check's own verdict (a real
failure is never filed as flaky). Either way the case's remaining checks run normally. One
retry per case at most; none once xdist is out of worker restarts (the run is ending)
or with ``--no-crash-retry``. The retry runs inside the controller's crash hook, so a
hang costs up to twice ``--timeout``.
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.harness import recording
from conformance.judge import jax_compat, repro
from conformance.judge.artifacts import SubjectError
from conformance.judge.runner import case_description, run_check
from conformance.plan.cases import Case
from conformance.plan.catalogue import Planned
from conformance.suite.check_registry import declaration
from run_records.results_file import CaseResult, write_json_atomic

PLUGIN_NAME = "conformance-isolation"
DIR_KEY = "conformance_isolation_dir"
MEMORY_KEY = "conformance_worker_memory"
FAULTS_FILE = "faults.json"
_CRASH_WAIT_S = 2.0  # how long the controller waits for a dead worker's exit status
# The retry's own watchdog (armed once its imports are done) ends a hang; the controller
# kills it only if it is still there this long after --timeout (start-up, a stuck exit).
_RETRY_GRACE_S = 120.0
# argv[1] is the settings JSON; sys.path first, so --impl's module imports as in the workers.
_RETRY_PROGRAM = (
    "import json, sys; settings = json.loads(sys.argv[1]); "
    "sys.path[:0] = [p for p in settings['sys_path'] if p not in sys.path]; "
    "from conformance.harness.isolation import retry_main; retry_main(settings)"
)


def add_options(group: Any) -> None:
    group.addoption(
        "--worker-memory-limit",
        default="auto",
        metavar="SIZE",
        help="data-segment limit of each worker process, e.g. 8G or 512M; 0 for none. "
        "Default 'auto': 80%% of the machine's memory",
    )
    group.addoption(
        "--no-crash-retry",
        action="store_true",
        help="record a check that crashed or hung its worker as 'error' at once. Default: "
        "rerun it once alone in a fresh process first; 'error' only if it crashes "
        "again, else 'flaky' (and the case's other checks still run)",
    )


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
            f"--worker-memory-limit {given!r} is not a size; write e.g. 8G, 512M or 0 (no limit)"
        )
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
    blocks = [
        b
        for b in words.replace("Current thread", "\x00Current thread")
        .replace("Thread 0x", "\x00Thread 0x")
        .split("\x00")
        if "File " in b
    ]
    chosen = next((b for b in blocks if b.startswith("Current thread")), None)
    chosen = chosen or next((b for b in blocks if "_pytest" in b), None) or (blocks[0] if blocks else "")
    frames = [line.strip() for line in chosen.splitlines() if line.strip().startswith("File ")]
    cwd, home = str(Path.cwd()) + os.sep, str(Path.home())
    return "\n".join(f.replace(cwd, "").replace(home, "~") for f in frames[:count])


@dataclasses.dataclass(frozen=True)
class Retry:
    """What rerunning a crashed check alone in a fresh process did."""

    seconds: float  # the check's duration if it ran to the end, else the process's lifetime
    verdict: str | None = None  # the check's verdict ("pass", "fail", "error") if it ran to the end
    reason: str = ""
    returncode: int | None = None  # None: still running when the controller killed it
    last_words: str = ""
    timeout: float | None = None
    last_line: str = ""  # of its stderr: why a retry that could not even start ended

    @property
    def crashed(self) -> bool:
        """Killed, timed out or died without a result: the crash is confirmed."""
        return self.verdict is None

    def summary(self) -> str:
        """One line, e.g. 'pass in 1.2 s' or 'was killed by SIGSEGV (Segmentation fault) after 3.0 s'."""
        after = f"after {self.seconds:.1f} s"
        if not self.crashed:
            line = self.reason.strip().partition("\n")[0]
            said = f": {line}" if line and self.verdict != "pass" else ""
            return f"{self.verdict} in {self.seconds:.1f} s{said}"
        if self.returncode is None or self.last_words.startswith("Timeout ("):
            limit = f" (--timeout {self.timeout:g} s)" if self.timeout else ""
            return f"timed out {after}{limit}"
        if self.returncode < 0:
            return f"was killed by {_signal_name(-self.returncode)} {after}"
        if "Fatal Python error:" in self.last_words:
            what = self.last_words.split("Fatal Python error:", 1)[1].partition("\n")[0].strip()
            return f"died: {what} {after}"
        said = f": {self.last_line}" if self.last_line else ""
        return f"exited with status {self.returncode} {after} without finishing the check{said}"


def crash_reason(worker_id: str, crash: Crash, retry: Retry | None, note: str = "") -> str:
    """The record's reason: the crash as today, or both attempts when it was retried."""
    explained = crash.explain()
    head, _, frames = explained.partition("\n")
    if retry is None:
        text = f"worker {worker_id} crashed: {explained}"
    elif retry.crashed:
        text = (
            f"worker {worker_id} crashed twice: {head} (confirmed by a retry in a fresh process, "
            f"which {retry.summary()})"
        )
    else:
        text = (
            f"worker {worker_id} crashed once, then the check ran normally when retried in a fresh "
            f"process: first attempt: {head}; retry: {retry.summary()}"
        )
    if retry is not None and frames:  # the first attempt's frames: where it died
        text += f"\n{frames}"
    return text + (f"\n{note}" if note else "")


def crash_verdict(retry: Retry | None) -> str:
    """``error`` for a crash not retried or seen again; ``flaky`` when the retry passed; else the
    retry's own verdict: the crash did not come back, but a real failure is never filed as flaky."""
    if retry is None or retry.crashed:
        return "error"
    return "flaky" if retry.verdict == "pass" else str(retry.verdict)


def retry_details(worker_id: str, crash: Crash, retry: Retry) -> dict[str, Any]:
    """Both attempts, for the record's ``details`` (plain JSON)."""
    head = crash.explain().partition("\n")[0]
    return {
        "first_attempt": f"worker {worker_id}: {head}",
        "retry": retry.summary(),
        "retry_verdict": retry.verdict or "crashed",
        "retry_s": round(retry.seconds, 3),
    }


# -- controller ---------------------------------------------------------------------------------------
class ControllerIsolation:
    """Controller side: hands workers their settings, explains crashes, remembers crashed cases."""

    def __init__(
        self,
        config: pytest.Config,
        lookup: Callable[[str, str], Planned | None],
        impl_of: Callable[[str], str],
        availability_of: Callable[[str], dict[str, object]],
    ):
        self.config = config
        self.lookup = lookup
        self._groups: dict[str, str] = {}
        self.impl_of = impl_of
        self.availability_of = availability_of
        self.folder = Path(tempfile.mkdtemp(prefix="conformance-workers-"))
        self.memory_limit = parse_size(config.getoption("worker_memory_limit"))
        self.started: dict[str, float] = {}
        self.faults: dict[str, str] = {}
        self.scheduled: set[str] = set()  # every test a worker collected (after deselection)
        self.finished: set[str] = set()
        self.retry_enabled = not config.getoption("no_crash_retry")
        self.retried: dict[str, str] = {}  # case id -> the check its one retry was spent on
        self.flaky: set[str] = set()  # node ids recorded as flaky
        self.workers_lost = 0  # dead workers so far, as xdist counts them against --max-worker-restart

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
            # Stopped on purpose (-x, a full disk): that reason is printed; restarts are not the fix.
            dsession = terminalreporter.config.pluginmanager.get_plugin("dsession")
            hint = "" if getattr(dsession, "shouldstop", False) else " (and a larger --max-worker-restart)"
            terminalreporter.write_line(
                f"conformance: {missing} checks never ran; results.jsonl is left incomplete: "
                f"rerun with --resume{hint} to finish it",
                red=True,
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        from conformance.harness import scheduling  # imports xdist, which this plugin implies

        return scheduling.make_scheduler(config, log, self._compile_group)

    def _compile_group(self, nodeid: str) -> str:
        """The compiled call a test's case shares with others (``Case.compile_key``): the scheduler
        sends such tests to one worker, which compiles the call once."""
        group = self._groups.get(nodeid)
        if group is None:
            parsed = recording.parse_node_id(nodeid)
            planned = self.lookup(*parsed) if parsed else None
            group = nodeid if planned is None else planned.case.compile_key
            self._groups[nodeid] = group
        return group

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if error is not None:  # xdist passes an error only for a worker that died
            self.workers_lost += 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: Any, config: pytest.Config) -> Any:
        if report.nodeid in self.flaky and report.when == "???":
            return "flaky", "~", ("FLAKY", {"yellow": True})
        return None

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        """Turn xdist's bare 'worker crashed' report into one that names the cause and the case."""
        worker = getattr(report, "node", None)
        worker_id = str(getattr(getattr(worker, "gateway", None), "id", "?"))
        started = self.started.get(crashitem)
        crash = Crash(
            _exit_status(worker),
            _read_last_words(self.folder, worker_id),
            None if started is None else time.monotonic() - started,
            self.config.getoption("timeout", default=None),
        )
        report.longrepr = crash_reason(worker_id, crash, None)
        parsed = recording.parse_node_id(crashitem)
        planned = self.lookup(*parsed) if parsed else None
        if planned is None:
            return
        result = self._crash_record(planned, worker_id, crash)
        report.longrepr = result.reason
        report.user_properties = [*getattr(report, "user_properties", ()), recording.result_property(result)]
        if result.verdict == "flaky":
            # Not a failure: pytest's exit status and -x ignore it; the terminal shows it as flaky.
            report.outcome = "passed"
            self.flaky.add(crashitem)
            return
        if result.details.get("retry_verdict") not in (None, "crashed"):
            return  # it ran to the end when retried: the case's other checks run as usual
        self.faults[planned.case.case_id] = f"{planned.check}: {result.reason.splitlines()[0]}"
        write_json_atomic(self.folder / FAULTS_FILE, self.faults)

    def _crash_record(self, planned: Planned, worker_id: str, crash: Crash) -> CaseResult:
        """The crashed check's record: ``error`` as it stands, or after one retry ``error``/``flaky``."""
        retry, note = None, ""
        spent = self.retried.get(planned.case.case_id)
        if spent is not None:
            note = f"(not retried: this case already had its one retry, on its {spent} check)"
        elif self.retry_enabled and self._restarts_left():
            self.retried[planned.case.case_id] = planned.check
            try:
                retry = self._retry(planned)
            except OSError as error:  # no retry is no verdict on flakiness: record the crash as it stands
                note = f"(not retried: the retry process did not start: {error})"
        # The whole record, repro script included: running it shows the crash again, outside the suite.
        script = repro.script(planned.case, declaration(planned.check), self.impl_of(planned.case.subject))
        verdict = crash_verdict(retry)
        return CaseResult(
            case=case_description(planned.case),
            check=planned.check,
            verdict=verdict,
            reason=crash_reason(worker_id, crash, retry, note),
            features=planned_features(planned),
            repro=script,
            details={} if retry is None else retry_details(worker_id, crash, retry),
            availability=self.availability_of(planned.case.subject),
        )

    def _restarts_left(self) -> bool:
        """Whether xdist will replace this dead worker; if not, the run is ending and is left as it was."""
        try:
            from xdist.dsession import get_default_max_worker_restart
        except ImportError:
            return True
        limit = get_default_max_worker_restart(self.config)
        return limit is None or self.workers_lost <= limit

    def _retry(self, planned: Planned) -> Retry:
        """Run the check alone in a fresh process with the workers' limits; wait for it (bounded)."""
        notes, result = self.folder / "retry.last-words", self.folder / "retry.json"
        for path in (notes, result):
            path.unlink(missing_ok=True)
        timeout = _per_test_timeout(self.config)
        settings = {
            "case": dataclasses.asdict(planned.case),
            "check": planned.check,
            "impl": self.impl_of(planned.case.subject),
            "profile": self.config.getoption("profile", default="ci"),
            "cache_dir": self.config.getoption("jax_cache_dir", default=None),
            "memory_limit": self.memory_limit,
            "timeout": timeout,
            "notes": str(notes),
            "result": str(result),
            "sys_path": [p for p in sys.path if p],
        }
        command = [sys.executable, "-c", _RETRY_PROGRAM, json.dumps(settings)]
        start = time.monotonic()
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                check=False,
                timeout=None if timeout is None else timeout + _RETRY_GRACE_S,
            )
            returncode, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired as expired:  # run() has killed it
            returncode, stderr = None, expired.stderr
        seconds = time.monotonic() - start
        words = notes.read_text(encoding="utf-8", errors="replace").strip() if notes.exists() else ""
        lines = (stderr or b"").decode("utf-8", errors="replace").strip().splitlines()
        outcome = _read_retry_result(result)
        if outcome is not None:
            return Retry(
                float(outcome.get("seconds", seconds)),
                str(outcome["verdict"]),
                str(outcome.get("reason", "")),
                returncode,
                words,
                timeout,
            )
        return Retry(seconds, None, "", returncode, words, timeout, lines[-1].strip() if lines else "")

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


def _per_test_timeout(config: pytest.Config) -> float | None:
    """pytest-timeout's limit (option, PYTEST_TIMEOUT or ini), or None without one."""
    try:
        from pytest_timeout import get_env_settings
    except ImportError:
        return None
    timeout = get_env_settings(config).timeout
    return float(timeout) if timeout else None


def _read_retry_result(path: Path) -> dict[str, Any] | None:
    """The retry's outcome, if it got as far as writing one (else it crashed or hung)."""
    try:
        outcome = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return outcome if isinstance(outcome, dict) and "verdict" in outcome else None


# -- retry (a fresh process of its own) -------------------------------------------------------------------
def retry_main(settings: dict[str, Any]) -> None:
    """Run one check on one case as a worker would, write its outcome to ``settings['result']``, exit.

    Started by ``ControllerIsolation._retry`` (``_RETRY_PROGRAM``). A crash or a hang
    leaves no result: faulthandler writes why into ``settings['notes']``, as in a worker."""
    notes = open(settings["notes"], "wb", buffering=0)  # noqa: SIM115 - faulthandler writes until exit
    faulthandler.enable(file=notes, all_threads=True)
    _limit_data_segment(int(settings.get("memory_limit") or 0))
    if settings.get("cache_dir"):
        jax_compat.enable_compilation_cache(settings["cache_dir"])
    case = Case(**{k: _tuples(v) for k, v in settings["case"].items()})
    if settings.get("timeout"):
        faulthandler.dump_traceback_later(float(settings["timeout"]), exit=True, file=notes)
    start = time.perf_counter()
    try:
        outcome = run_check(case, settings["check"], impl=settings["impl"], profile=settings["profile"])
        verdict, reason = outcome.verdict, outcome.reason
    except Exception as error:  # noqa: BLE001 - the subject raised: an error verdict, not a crash
        verdict = "error"
        reason = str(error) if isinstance(error, SubjectError) else f"{type(error).__name__}: {error}"
    seconds = time.perf_counter() - start
    faulthandler.cancel_dump_traceback_later()
    write_json_atomic(Path(settings["result"]), {"verdict": verdict, "reason": reason, "seconds": seconds})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: a crash in JAX's exit handlers is no part of the check


def _tuples(value: Any) -> Any:
    """JSON's lists back into the tuples ``Case`` holds."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _limit_data_segment(limit: int) -> None:
    """RLIMIT_DATA to ``limit`` bytes (0: leave it), never above a hard limit already set."""
    if limit:
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard == resource.RLIM_INFINITY or limit < hard:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


# -- worker ---------------------------------------------------------------------------------------------
class WorkerIsolation:
    """Worker side: memory limit, last-words file, GIL-free timeouts, known-crashed cases."""

    def __init__(self, config: pytest.Config, availability_of: Callable[[str], dict[str, object]]):
        self.availability_of = availability_of
        workerinput = config.workerinput  # type: ignore[attr-defined]
        self.folder = Path(workerinput[DIR_KEY])
        self.worker_id = str(workerinput.get("workerid", "gw"))
        _limit_data_segment(int(workerinput.get(MEMORY_KEY) or 0))
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
        result = CaseResult(
            case=case_description(planned.case),
            check=planned.check,
            verdict="error",
            reason=f"not run: an earlier check of this case crashed its worker ({fault})",
            features=planned_features(planned),
            availability=self.availability_of(planned.case.subject),
        )
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


def configure(
    config: pytest.Config,
    lookup: Callable[[str, str], Planned | None],
    impl_of: Callable[[str], str],
    availability_of: Callable[[str], dict[str, object]],
) -> None:
    """Register the side of isolation this process plays (nothing without xdist); ``availability_of``:
    a subject's record block, for the records it writes itself."""
    if config.pluginmanager.get_plugin(PLUGIN_NAME) is not None:
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        if DIR_KEY in workerinput:
            config.pluginmanager.register(WorkerIsolation(config, availability_of), PLUGIN_NAME)
    elif config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(
            ControllerIsolation(config, lookup, impl_of, availability_of), PLUGIN_NAME
        )

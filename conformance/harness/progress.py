"""Live progress of a run: checks done / planned, verdicts so far, the case running now,
elapsed time and an estimate of the time left.

``Progress`` is pure state fed by events (the planned items' costs, an item started, an item
done with its verdict and seconds) that formats the line; ``Display`` decides when to show it
(in place on a terminal, a plain line every ``interval_s`` otherwise); ``ProgressHooks`` is the
pytest glue, registered on the controller only (xdist workers never draw anything).

The ETA weighs what is left by cost: an item costs its case's flops plus a fixed overhead
(``OVERHEAD_FLOPS``: compiling, the reference, pytest's own work), and the seconds measured so
far per unit of cost price the remaining cost. Before any item has finished there is no ETA.

Drawing: the line is written with "\\r" through pytest's own terminal reporter, not with
``rich`` (so ``rich`` is no dependency): a ``rich.live.Live`` redraws the terminal's last line from
its own thread and cannot see the dots, percentages and crash lines pytest's terminal writer
puts on that same line, so the two overwrite each other; one writer that knows the current line
stays clean. While the live line is shown pytest's per-test letters are left out (the line
counts them), and with ``-v`` (a line per test) or without a TTY the plain periodic line is used.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.harness.recording import parse_node_id

DEFAULT_INTERVAL_S = 30.0
OVERHEAD_FLOPS = 1e8  # about the work a small case's fixed costs are worth, in flops
PREFIX = "conformance progress:"
_SHOWN = ("pass", "fail", "error")  # always shown; others only once they occur


def item_cost(flops: float) -> float:
    return float(flops) + OVERHEAD_FLOPS


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class Progress:
    """Counts and cost of a run so far; ``line`` formats them."""

    planned: int = 0
    planned_cost: float = 0.0
    done: int = 0
    done_cost: float = 0.0
    measured_s: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)
    current: str = ""

    def plan(self, costs: Iterable[float]) -> None:
        costs = list(costs)
        self.planned, self.planned_cost = len(costs), float(sum(costs))

    def start(self, label: str) -> None:
        self.current = label

    def finish(self, verdict: str, seconds: float, cost: float) -> None:
        self.done += 1
        self.done_cost += cost
        self.measured_s += max(seconds, 0.0)
        self.counts[verdict] += 1

    def eta_s(self) -> float | None:
        """Seconds left, priced by cost (by count when no cost is known); None before anything
        was measured or when the plan is unknown."""
        if self.planned == 0 or self.done == 0 or self.measured_s <= 0:
            return None
        if self.done >= self.planned:
            return 0.0
        if self.done_cost > 0 and self.planned_cost > 0:
            return self.measured_s * max(self.planned_cost - self.done_cost, 0.0) / self.done_cost
        return self.measured_s * (self.planned - self.done) / self.done

    def line(self, elapsed_s: float) -> str:
        planned = str(self.planned) if self.planned else "?"
        verdicts = [f"{self.counts[v]} {v}" for v in _SHOWN]
        verdicts += [f"{n} {v}" for v, n in sorted(self.counts.items()) if v not in _SHOWN and n]
        parts = [f"{PREFIX} {self.done}/{planned} checks", ", ".join(verdicts)]
        eta = self.eta_s()
        timing = f"{_clock_text(elapsed_s)} elapsed"
        finished = eta is None or self.done >= self.planned
        parts.append(timing if finished else f"{timing}, ETA {_clock_text(eta)}")
        if self.current and self.done < self.planned:
            parts.append(self.current)  # last: the part a narrow terminal cuts
        return " | ".join(parts)


class Display:
    """When to show the line: in place after every event (``rewrite``), or, without a terminal,
    ``write_line`` once ``interval_s`` has passed since the last one; always once at the end.

    Without a terminal a heartbeat thread (``start_heartbeat``) also calls ``update``, so a log
    gets its line every ``interval_s`` while one long item runs (a thorough case shrinking for
    minutes): CI systems end jobs whose log stays silent, and a silent log reads as a hang.
    The lock keeps the thread's line and an event's line from interleaving."""

    def __init__(
        self,
        progress: Progress,
        write_line: Callable[[str], None],
        rewrite: Callable[..., None] | None = None,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.progress, self.write_line, self.rewrite = progress, write_line, rewrite
        self.interval_s, self.clock = interval_s, clock
        self.started = self.last = clock()
        self.closed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def update(self) -> None:
        with self._lock:
            if self.closed:
                return
            now = self.clock()
            if self.rewrite is not None:
                self.rewrite(self.progress.line(now - self.started))
            elif now - self.last >= self.interval_s:
                self.last = now
                self.write_line(self.progress.line(now - self.started))

    def start_heartbeat(self) -> threading.Thread | None:
        """Without a terminal: a daemon thread that shows the line on time between events."""
        if self.rewrite is not None:
            return None  # the live line is redrawn by events; a thread would race pytest's writes

        def beat() -> None:
            while not self._stop.wait(self.interval_s / 4):
                self.update()

        thread = threading.Thread(target=beat, name="conformance-progress", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if self.closed:
                return
            self.closed = True
            line = self.progress.line(self.clock() - self.started)
            if self.rewrite is not None:
                self.rewrite(line, final=True)  # kept, as the run's last word
            else:
                self.write_line(line)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(f"--progress-interval {text!r}: give seconds, e.g. 30") from None
    if not 0 < value < float("inf"):
        raise pytest.UsageError(f"--progress-interval {text!r}: give a positive number of seconds")
    return value


def add_options(group: Any) -> None:
    group.addoption("--no-progress", action="store_true", help="no live progress line")
    group.addoption(
        "--progress-interval",
        type=_seconds,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"without a terminal, print the progress line this often (default {DEFAULT_INTERVAL_S:g})",
    )


def costs_of(plan: dict[str, tuple[Any, ...]]) -> dict[tuple[str, str], float]:
    """(check, case id) -> the case's flops, from the plugin's plan (check -> Planned items)."""
    return {(p.check, p.case.case_id): float(p.case.shape.flops) for items in plan.values() for p in items}


class ProgressHooks:
    """pytest glue on the controller: the plan from the collected ids, events from the records."""

    def __init__(
        self,
        config: pytest.Config,
        plan: Callable[[], dict[str, tuple[Any, ...]]],
        interval_s: float = DEFAULT_INTERVAL_S,
    ):
        self.config, self._plan_of, self.interval_s = config, plan, interval_s
        self.progress = Progress()
        self.display: Display | None = None
        self.started: dict[str, float] = {}
        self._ids: set[str] = set()
        self._costs: dict[tuple[str, str], float] | None = None

    def cost(self, key: tuple[str, str] | None) -> float:
        if self._costs is None:
            self._costs = costs_of(self._plan_of())
        return item_cost(self._costs.get(key, 0.0) if key else 0.0)

    def _clear(self) -> None:  # the live line, before a line pytest or xdist writes mid-run
        pass

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self._clear()  # xdist's "[gw0] node down: ..." would be written over it

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self._clear()

    @property
    def live(self) -> bool:
        return self.display is not None and self.display.rewrite is not None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        writer = self.config.get_terminal_writer()
        live = bool(getattr(reporter, "isatty", False)) and self.config.get_verbosity() <= 0

        def rewrite(line: str, final: bool = False) -> None:
            # "\x1b[K" clears the rest of the old line; the last "\r" leaves the cursor at column 0,
            # so what pytest writes next (its "[100%]") replaces the line instead of wrapping it.
            end = "\x1b[K\n" if final else "\x1b[K\r"
            reporter.write("\r" + line[: max(writer.fullwidth - 1, 20)] + end, flush=True)

        def write_line(line: str) -> None:
            if writer.width_of_current_line:  # after pytest's dots
                writer.line()
            reporter.write_line(line)

        self.display = Display(
            self.progress, write_line, rewrite if live else None, interval_s=self.interval_s
        )
        if live:
            self._clear = lambda: reporter.write("\r\x1b[K", flush=True)
        else:
            self.display.start_heartbeat()

    def _plan(self, nodeids: Iterable[str]) -> None:
        self._ids.update(nodeids)
        self.progress.plan(self.cost(parse_node_id(nodeid)) for nodeid in self._ids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:  # an in-process run; under xdist the workers collect
            self._plan(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._plan(ids)  # every worker collects the same ids: the union is the plan

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.started[nodeid] = time.monotonic()
        key = parse_node_id(nodeid)
        self.progress.start(f"{key[1]} {key[0]}" if key else nodeid)
        if self.display is not None:
            self.display.update()

    def on_record(self, nodeid: str, check: str, case_id: str, verdict: str) -> None:
        """An item's record was written (the conformance plugin calls this)."""
        started = self.started.pop(nodeid, None)
        seconds = 0.0 if started is None else time.monotonic() - started
        self.progress.finish(verdict, seconds, self.cost((check, case_id)))
        if self.display is not None:
            self.display.update()

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(self, report: Any, config: pytest.Config) -> Any:
        status = yield
        if self.live and status and status[1]:
            return status[0], "", status[2]  # the live line counts it; a letter would break the line
        return status

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.display is not None:
            self.display.close()


def configure(config: pytest.Config, plan: Callable[[], dict[str, tuple[Any, ...]]]) -> ProgressHooks | None:
    """Registers the hooks on the controller unless --no-progress; the plugin feeds on_record."""
    if hasattr(config, "workerinput") or config.getoption("no_progress"):
        return None
    hooks = ProgressHooks(config, plan, config.getoption("progress_interval"))
    config.pluginmanager.register(hooks, "conformance-progress")
    return hooks

"""A pytest plugin that times where a conformance run spends its time, loaded by
``benchmarks.suite_speed`` as ``-p benchmarks.suite_probe`` in the runs it starts.

It wraps the three kinds of work that are not the harness's own, at the names the suite
calls them by (so nothing is counted twice):

    subject    conformance.judge.artifacts.timed_call: every subject call (trace, compile, run)
    reference  conformance.judge.artifacts.attention_forward / attention_backward (float64)
    baseline   conformance.judge.baseline.forward / gradients (NumPy, same dtype)
    lowering   conformance.judge.artifacts.lower: the subject's call traced and lowered for its
               hardware with the interpreter off (what lowers, vmem, smem and observable read)

It also times the suite's other phases, wherever they run (the xdist controller included), so a
regression names its phase:

    plan       conformance.harness.plugin.plan: the catalogue (cases, checks, sampling)
    records    conformance.harness.recording.Recorder.on_report / finish: results.jsonl, summary.json
    report     conformance.harness.plugin._render_report: report.md and its plots

Calls made while a failure is being shrunk (``conformance.plan.shrink.shrink``) are also counted
under ``<target>@shrink``, so "once per case" can be told apart from shrinking's extra cases.
It writes one JSON file per process (xdist workers included) into the folder named by
``$SUITE_PROBE_DIR``: the seconds and calls of each kind, the tests the process ran, and
its lifetime from process start (imports included) to pytest's unconfigure. Everything
else a process did is harness. Without ``$SUITE_PROBE_DIR`` the plugin does nothing.
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

PROBE_DIR_ENV = "SUITE_PROBE_DIR"
# The work on the subject and on the truth it is judged by; the rest of a process's life is harness.
KINDS = ("subject", "reference", "baseline", "lowering")
PHASES = ("plan", "records", "report")  # the other timed phases (harness, named in the phase table)
# (module, attribute, kind): patched on the module object, where the suite looks them up.
TARGETS: tuple[tuple[str, str, str], ...] = (
    ("conformance.judge.artifacts", "timed_call", "subject"),
    # The subject's own calls that checks run outside ``timed_call``: its JAX call stated
    # (``subject_calls``, the adapter's ``jax_call``), then traced, compiled and run under
    # ``jax.vmap`` or on sharded inputs, and its public API as the api_contract check asks it.
    ("conformance.judge.checks.vmap", "subject_calls", "subject"),
    ("conformance.judge.checks.vmap", "_run_vmapped", "subject"),
    ("conformance.judge.checks.sharded", "subject_calls", "subject"),
    ("conformance.judge.checks.sharded", "_run_placed", "subject"),
    ("conformance.judge.checks.api_contract", "_Caller.__call__", "subject"),
    ("conformance.judge.artifacts", "attention_forward", "reference"),
    ("conformance.judge.artifacts", "attention_backward", "reference"),
    ("conformance.judge.baseline", "forward", "baseline"),
    ("conformance.judge.baseline", "gradients", "baseline"),
    ("conformance.harness.plugin", "plan", "plan"),
    ("conformance.judge.artifacts", "lower", "lowering"),
    ("conformance.harness.recording", "Recorder.on_report", "records"),
    ("conformance.harness.recording", "Recorder.finish", "records"),
    ("conformance.harness.plugin", "_render_report", "report"),
)


class Probe:
    """Per-process accumulators (a plugin instance, never module state)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.target_calls: collections.Counter[str] = collections.Counter()  # by "module.attribute"
        self.tests = 0
        self.shrinking = 0  # depth of conformance.plan.shrink.shrink calls in progress
        self.patch = pytest.MonkeyPatch()

    def timed(self, kind: str, target: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[kind] += time.perf_counter() - start
                self.calls[kind] += 1
                self.target_calls[target + ("@shrink" if self.shrinking else "")] += 1

        return wrapper

    def flagged(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.shrinking += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.shrinking -= 1

        return wrapper

    def install(self) -> None:
        import importlib

        for module_name, attribute, kind in TARGETS:
            owner: Any = importlib.import_module(module_name)
            *path, name = attribute.split(".")  # "Class.method": patched on the class
            for part in path:
                owner = getattr(owner, part)
            wrapped = self.timed(kind, f"{module_name}.{attribute}", getattr(owner, name))
            self.patch.setattr(owner, name, wrapped)
        shrink = importlib.import_module("conformance.plan.shrink")  # looked up at each use by the runner
        self.patch.setattr(shrink, "shrink", self.flagged(shrink.shrink))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        yield
        self.tests += 1  # runs only where tests execute: the xdist workers, or the one process

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.patch.undo()
        worker = getattr(config, "workerinput", {}).get("workerid", "")
        record = {
            "pid": os.getpid(),
            "worker": worker,
            "tests": self.tests,
            "lifetime_s": time.time() - psutil.Process().create_time(),
            "seconds": {k: self.seconds[k] for k in KINDS},
            "calls": {k: self.calls[k] for k in KINDS},
            "phases": {k: self.seconds[k] for k in PHASES},
            "target_calls": dict(self.target_calls),
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"probe-{os.getpid()}.json").write_text(json.dumps(record, indent=1))


def pytest_configure(config: pytest.Config) -> None:
    folder = os.environ.get(PROBE_DIR_ENV)
    if not folder:
        return
    probe = Probe(Path(folder))
    probe.install()
    config.pluginmanager.register(probe, "suite-probe")

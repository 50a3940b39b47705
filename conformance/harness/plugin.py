"""The pytest plugin behind ``pytest conformance``: options, parametrization, records.

Options: ``--impl NAME|all|a,b|package.module:function`` (default: the primary subject),
``--profile ci|dev|thorough``, ``--report-dir DIR``, ``--resume``, ``--no-shrink``,
``--jax-cache-dir DIR`` (JAX's persistent compilation cache), ``--no-progress`` (``progress``),
``--no-plots`` (report.md without its plot),
``--shard K/N`` (a cost-balanced slice of the plan, ``conformance/plan/shards.py``; merge the
folders with ``python -m reports merge``).
Hypothesis' own ``--hypothesis-seed`` picks the seed of the drawn cases (the ci
profile always uses seed 0, so its cases never change).

Every ``test_<check>(planned, conformance)`` (``conformance/test_checks.py`` defines one
per declared check) is parametrized over the catalogue's (case, check) items, ids being
case ids. Items run grouped by case (all checks of one case back to back) so the
reference and the subject's outputs are computed once per case. Records are written by
the controller only (``recording``), so the design holds under pytest-xdist; workers get
the controller's seed.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.harness import isolation, keyword_prefilter, progress, recording
from conformance.judge import jax_compat, known_issues
from conformance.judge.runner import Runner, availability_block, case_description
from conformance.judge.settled_cache import SettledCache
from conformance.plan import profiles, shards, user_cases
from conformance.plan.catalogue import Planned, pairwise_coverage, plan
from conformance.plan.subjects import PRIMARY_SUBJECT, Subject, resolve_subjects
from conformance.suite import host_devices
from conformance.suite.check_registry import CHECKS
from kernels.contract.base import DTYPES
from kernels.hardware.gpu_chips import DEFAULT_GPU_TARGETS, GPU_CHIPS, parse_gpu_targets
from kernels.hardware.tpu_chips import DEFAULT_TPU_TARGETS, TPU_CHIPS, parse_targets
from kernels.registry import UnknownSubjectError, subject_names
from reports.run_report.grid import not_checked_reasons, nothing_checked
from run_records.environment import environment_block
from run_records.folder_lock import FolderBusyError, FolderLock
from run_records.ledger_file import BUILTIN_LEDGER
from run_records.results_file import (
    SCHEMA_VERSION,
    WARNINGS,
    CaseResult,
    DiskFullError,
    ResultsFileError,
    completed_keys,
    read_results,
)
from versions import table

PLUGIN_NAME = "conformance-suite"
DISK_FULL_MARGIN_BYTES = 1 << 20  # summary.json, report.md and its plots on top of the records
SEED_KEY = "conformance_seed"
RESUME_KEY = "conformance_resume_keys"
# The exit code of a run that checked nothing: every selected subject unavailable, or every
# planned check unsupported or unavailable. pytest's own codes are 0-5 (5: nothing collected);
# 6 is none of them (docs/reliability.md lists them all).
EXIT_NOTHING_CHECKED = 6


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "attention conformance suite")
    group.addoption(
        "--impl",
        default=PRIMARY_SUBJECT,
        help="subject(s) to check: a name, 'all', 'a,b', or 'package.module:function' "
        "(which is imported and run). Default: %(default)s",
    )
    group.addoption(
        "--profile",
        default="ci",
        choices=sorted(profiles.PROFILES),
        help="case budget: ci (fixed cases), dev, thorough (nightly). Default: %(default)s",
    )
    group.addoption(
        "--report-dir",
        default=None,
        help="where results.jsonl and summary.json go. Default: reports/jax-<installed version>",
    )
    group.addoption(
        "--resume",
        action="store_true",
        help="append to the report folder's results.jsonl and skip the checks already recorded",
    )
    group.addoption(
        "--no-shrink", action="store_true", help="do not shrink failing cases (faster failing runs)"
    )
    group.addoption(
        "--no-plots",
        action="store_true",
        help="write report.md without its PNG plot (matplotlib takes seconds; `python -m reports "
        "render DIR` draws it later from the records)",
    )
    group.addoption(
        "--jax-cache-dir",
        default=None,
        help="JAX's persistent compilation cache folder (every compilation kept, so a "
        "rerun skips XLA compiles), with the suite's settled work in its settled/ folder (float64 "
        "references, baselines, lowerings, keyed by value). Default: off (nox -s conformance sets one)",
    )
    group.addoption(
        "--known-issues",
        action="append",
        default=[],
        metavar="FILE",
        help="a TOML ledger of known defects merged with the built-in one (repeatable); a "
        "failure an entry explains is reported as 'known' (format: docs/known-issues.md)",
    )
    group.addoption(
        "--strict-known",
        action="store_true",
        help="exit non-zero when a ledger entry no longer reproduces or matches nothing (stale)",
    )
    group.addoption(
        "--case",
        action="append",
        default=[],
        metavar="SPEC",
        help="also check this case of your own on every subject (repeatable), e.g. "
        f"--case '{user_cases.EXAMPLE}' (keys: conformance/plan/user_cases.py)",
    )
    group.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run only shard K of N of the planned checks (whole cases, balanced by estimated cost; "
        "the same slice on every machine); merge the folders with `python -m reports merge`",
    )
    group.addoption(
        "--tpu",
        default=",".join(DEFAULT_TPU_TARGETS),
        metavar="CHIPS",
        help="TPU chips the vmem check budgets for, comma-separated: the smallest VMEM among them "
        f"counts ({', '.join(TPU_CHIPS)}). Default: %(default)s",
    )
    group.addoption(
        "--gpu",
        default=",".join(DEFAULT_GPU_TARGETS),
        metavar="GPUS",
        help="GPUs the smem check budgets for, comma-separated: the least shared memory per block among "
        f"them counts ({', '.join(GPU_CHIPS)}). Default: %(default)s",
    )
    isolation.add_options(group)
    progress.add_options(group)


def configure(config: pytest.Config) -> None:
    if config.pluginmanager.get_plugin(PLUGIN_NAME) is None:
        host_devices.set_host_devices(os.environ)  # before JAX starts its backend (sharded's mesh)
        cache_dir = config.getoption("jax_cache_dir")
        if cache_dir:  # before any compilation, in every process (xdist workers configure too)
            jax_compat.enable_compilation_cache(cache_dir)
        plugin = ConformancePlugin(config)
        config.pluginmanager.register(plugin, PLUGIN_NAME)
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistSeed(plugin), PLUGIN_NAME + "-xdist")
        isolation.configure(config, plugin.planned, plugin.impl_of, plugin.availability_of)
        plugin.progress = progress.configure(config, lambda: plugin.plan)


def of(config: pytest.Config) -> ConformancePlugin:
    return config.pluginmanager.get_plugin(PLUGIN_NAME)


def _installed_jax() -> str | None:
    return _installed("jax")


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _default_report_dir(root: Path) -> Path:
    return root / "reports" / f"jax-{_installed_jax() or 'none'}"


class _XdistSeed:
    """Hands the controller's seed to every xdist worker (only registered when xdist is)."""

    def __init__(self, plugin: ConformancePlugin):
        self.plugin = plugin

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[SEED_KEY] = self.plugin.seed
        if self.plugin.resume:
            # Read once by the controller: a worker started after a crash must deselect exactly
            # what the first one did (xdist requires equal collections), not this run's new records.
            node.workerinput[RESUME_KEY] = sorted(self.plugin.resume_keys())


class ConformancePlugin:
    """Session state of one run (never module-level): subjects, catalogue, runner, recorder."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.impl: str = config.getoption("impl")
        self.profile = dataclasses.replace(
            profiles.get(config.getoption("profile")),
            tpu_targets=_targets_option(parse_targets, config.getoption("tpu")),
            gpu_targets=_targets_option(parse_gpu_targets, config.getoption("gpu")),
        )
        self.seed = self._choose_seed()
        report_dir = config.getoption("report_dir")
        self.report_dir = Path(report_dir) if report_dir else _default_report_dir(config.rootpath)
        self.resume: bool = config.getoption("resume")
        self.shrink = not config.getoption("no_shrink")
        self.jax_version = _installed_jax()
        # Every library of the version table, None where not installed: a ledger entry's tokamax range
        # holds only with one.
        self.versions = {table.PRIMARY.name: self.jax_version} | {
            library.name: _installed(library.distribution) for library in table.COMPANIONS
        }
        self.strict_known: bool = config.getoption("strict_known")
        self.shard = _shard_option(config.getoption("shard"))
        if self.shard is not None and not self.resume:
            _require_shared_seed(self.profile, config.getoption("hypothesis_seed", default=None), self.shard)
        self._ledger: known_issues.Ledger | None = None
        self.recorder: recording.Recorder | None = None
        self.progress: progress.ProgressHooks | None = None  # the live line (controller only)
        self._subjects: tuple[Subject, ...] | None = None
        self._plan: dict[str, tuple[Planned, ...]] | None = None
        self._runner: Runner | None = None
        self._resume_keys: set[tuple[str, str, str]] | None = None
        try:
            self.user_cases = tuple(user_cases.parse_case(text, DTYPES) for text in config.getoption("case"))
        except user_cases.CaseSyntaxError as error:
            raise pytest.UsageError(str(error)) from None
        self._lock: FolderLock | None = None
        self._session: pytest.Session | None = None
        self._selected = 0  # checks this run will record (after -k and --resume deselection)
        self._disk_full = ""  # the one line that ends a run whose disk filled up
        if self.is_controller:
            try:  # before reading anything in the folder: a --resume reads what it may not share
                self._lock = FolderLock(self.report_dir).acquire()
            except FolderBusyError as error:
                raise pytest.UsageError(str(error)) from None
        if self.resume and self.is_controller:
            self.resume_keys()  # a bad or mismatched results file stops the run here, in one line
        if self.is_controller:
            self.ledger  # noqa: B018  (a bad ledger stops the run before anything runs, in one line)

    # -- session state --------------------------------------------------------------------
    @property
    def is_controller(self) -> bool:
        return not hasattr(self.config, "workerinput")

    def _choose_seed(self) -> int:
        worker = getattr(self.config, "workerinput", None)
        if worker and SEED_KEY in worker:
            return int(worker[SEED_KEY])
        given = self.config.getoption("hypothesis_seed", default=None)
        if given is not None:
            return int(given)
        return 0 if self.profile.derandomize else int.from_bytes(os.urandom(4), "little")

    @property
    def subjects(self) -> tuple[Subject, ...]:
        if self._subjects is None:
            try:
                self._subjects = resolve_subjects(self.impl, self.profile.name)
            except UnknownSubjectError as error:
                raise pytest.UsageError(str(error)) from None
        return self._subjects

    @property
    def plan(self) -> dict[str, tuple[Planned, ...]]:
        if self._plan is None:
            self._plan = plan(self.subjects, self.profile, self.seed)
            if self.user_cases:
                self._plan = user_cases.extend_plan(self._plan, self.subjects, self.user_cases)
            if self.shard is not None:
                execution = {s.name: s.availability.execution for s in self.subjects}
                self._plan = shards.take_shard(self._plan, execution, *self.shard)
        return self._plan

    @property
    def ledger(self) -> known_issues.Ledger:
        """The built-in ledger merged with every --known-issues file (read once per process)."""
        if self._ledger is None:
            paths = [BUILTIN_LEDGER, *map(Path, self.config.getoption("known_issues"))]
            names = {*subject_names(), *(s.name for s in self.subjects)}
            try:
                self._ledger = known_issues.load_ledger(paths, subjects=names, checks=CHECKS)
            except known_issues.LedgerError as error:
                raise pytest.UsageError(str(error)) from None
        return self._ledger

    def classify_known(self, result: CaseResult) -> CaseResult:
        """A failure the ledger explains becomes ``known`` (its record otherwise unchanged)."""
        return self.ledger.apply(result, self.versions)

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            known = lambda result: self.classify_known(result).verdict == "known"  # noqa: E731
            settled = SettledCache.under(self.config.getoption("jax_cache_dir"))
            self._runner = Runner(
                self.subjects, self.profile, shrink=self.shrink, known=known, settled=settled
            )
        return self._runner

    def availability_of(self, subject: str) -> dict[str, object]:
        """A subject's record block (availability, execution, versions), for the records isolation
        writes itself (a crash, a case not run after one): a ledger entry that names an execution
        reads it there as in every other record."""
        found = next((s for s in self.subjects if s.name == subject), None)
        return {} if found is None else availability_block(found)

    def impl_of(self, subject: str) -> str:
        """What --impl named a subject by (repro scripts resolve it again)."""
        return next((s.impl for s in self.subjects if s.name == subject), subject)

    def planned(self, check: str, case_id: str) -> Planned | None:
        """The planned item of a check by case id (isolation: the case a dead worker was running)."""
        return next((p for p in self.plan.get(check, ()) if p.case.case_id == case_id), None)

    def lookup(self, check: str, case_id: str):
        """The description of a planned case by check and id (for records of crashed tests)."""
        for item in self.plan.get(check, ()):
            if item.case.case_id == case_id:
                return case_description(item.case)
        return None

    # -- pytest hooks -----------------------------------------------------------------------
    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        names = ", ".join(s.name if s.available else f"{s.name} (unavailable)" for s in self.subjects)
        return [
            f"conformance: subjects {names}; profile {self.profile.name}; seed {self.seed}; "
            f"report dir {self.report_dir}"
        ]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "planned" not in metafunc.fixturenames:
            return
        check = metafunc.function.__name__.removeprefix("test_")
        if check not in CHECKS:
            raise pytest.UsageError(
                f"{metafunc.function.__name__}: no check named {check!r}; checks are {CHECKS}"
            )
        items = self.plan[check]
        keep = keyword_prefilter.keyword_filter(metafunc)
        if keep is not None:
            # What -k would deselect is never made an item; where it keeps none, pytest's own
            # -k drops them (an empty parameter set would leave a stray skipped item).
            items = tuple(p for p in items if keep(p.test_id)) or items
        metafunc.parametrize("planned", items, ids=[p.test_id for p in items])

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        order = self._case_order()
        check_rank = {c: i for i, c in enumerate(CHECKS)}
        compile_order: dict[str, int] = {}
        group_of: dict[str, int] = {}  # case id -> its compile group, found once per case
        for case in sorted(self._cases().values(), key=lambda case: order[case.case_id]):
            group_of[case.case_id] = compile_order.setdefault(case.compile_key, len(compile_order))

        def key(item: pytest.Item) -> tuple:
            # Cases that share a compiled kernel run side by side, each case's checks together:
            # xdist's `load` hands out consecutive items in chunks, so with -n K they mostly
            # land on one worker too, and the jit cache (and the case's float64 reference) is hit.
            planned = _planned_of(item)
            if planned is None:
                return (1, 0, 0, 0, item.nodeid)
            group = group_of.get(planned.case.case_id, len(compile_order))
            return (0, group, order.get(planned.case.case_id, len(order)), check_rank[planned.check], "")

        items.sort(key=key)
        _require_every_check(items)
        if self.resume:
            done = self.resume_keys()
            keep, dropped = [], []
            for item in items:
                planned = _planned_of(item)
                (dropped if planned is not None and planned.key in done else keep).append(item)
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = keep

    def _cases(self) -> dict[str, Any]:
        """Case id -> the case, over every check's plan."""
        return {item.case.case_id: item.case for check in CHECKS for item in self.plan[check]}

    def _case_order(self) -> dict[str, int]:
        order: dict[str, int] = {}
        for check in CHECKS:
            for item in self.plan[check]:
                order.setdefault(item.case.case_id, len(order))
        return order

    def resume_keys(self) -> set[tuple[str, str, str]]:
        """The (subject, case, check) keys a --resume run skips: read once, by the controller."""
        if self._resume_keys is None:
            worker = getattr(self.config, "workerinput", None)
            if worker and RESUME_KEY in worker:
                self._resume_keys = {tuple(key) for key in worker[RESUME_KEY]}
            else:
                self._resume_keys = self._recorded_keys()
        return self._resume_keys

    def _recorded_keys(self) -> set[tuple[str, str, str]]:
        try:
            recorded = read_results(self.report_dir)
        except ResultsFileError as error:
            if not (self.report_dir / "results.jsonl").exists():
                return set()
            raise pytest.UsageError(f"--resume: {error}") from None
        self._check_resumable(recorded.header)
        return completed_keys(recorded.results)

    def _check_resumable(self, header: dict[str, Any]) -> None:
        """--resume continues the same run: other options would mix two runs' cases in one file.
        Without --hypothesis-seed, a resumed run takes the recorded run's seed (its drawn cases)."""
        recorded_seed = header.get("hypothesis_seed")
        if self.config.getoption("hypothesis_seed", default=None) is None and isinstance(recorded_seed, int):
            self.seed = recorded_seed
        ours = {
            "--profile": self.profile.name,
            "--impl": self.impl,
            "--hypothesis-seed": self.seed,
            "--shard": _shard_text(_shard_record(self.shard)) or "none",
        }
        theirs = {
            "--profile": header.get("profile"),
            "--impl": header.get("impl"),
            "--hypothesis-seed": header.get("hypothesis_seed"),
            "--shard": _shard_text(header.get("shard")),
        }
        for option, value in ours.items():
            if theirs[option] is not None and theirs[option] != value:
                path = self.report_dir / "results.jsonl"
                raise pytest.UsageError(
                    f"--resume: {path} was recorded with {option} {theirs[option]}, not {value}; "
                    f"rerun with {option} {theirs[option]}, or drop --resume to start over"
                )

    def _narrowed(self) -> bool:
        """Whether the user left planned checks out (-k, -m, --deselect): an entry whose checks
        were left out is not stale, only not run here."""
        option = self.config.option
        return bool(
            getattr(option, "keyword", "")
            or getattr(option, "markexpr", "")
            or getattr(option, "deselect", None)
        )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._selected = len(session.items)  # after every deselection (-k, --resume)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._selected = len(ids)  # under xdist the controller collects nothing itself

    @pytest.hookimpl(tryfirst=True)  # before pytest's unraisable-exception plugin collects
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        if hasattr(config, "workerinput"):
            # An xdist worker about to exit, which the controller waits for: pytest collects garbage
            # once more here, and a full collection walks JAX's caches of every program the worker
            # ran (1.5 to 2 s at --impl all). Frozen, it walks only what is new; the process ends.
            gc.freeze()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self._disk_full:
            terminalreporter.write_line(self._disk_full, red=True)
        for line, red in getattr(self, "_ledger_lines", ()):
            terminalreporter.write_line(line, red=red, yellow=not red)
        if self.resume and self.is_controller and self._resume_keys:
            terminalreporter.write_line(
                f"conformance: --resume: {len(self._resume_keys)} checks already recorded were deselected"
            )

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.is_controller:
            return
        header = {
            "impl": self.impl,
            "subjects": [s.name for s in self.subjects],
            "profile": self.profile.name,
            "hypothesis_seed": self.seed,
            "shard": _shard_record(self.shard),
            "environment": environment_block(),
        }  # a killed run's report still names its environment
        self._session = session
        try:
            self.recorder = recording.Recorder(
                self.report_dir, header, resume=self.resume, lookup=self.lookup, amend=self.classify_known
            )
        except DiskFullError as error:
            self._stop_for_full_disk(error)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.recorder is None:
            return
        try:
            record = self.recorder.on_report(report)
        except DiskFullError as error:
            self.recorder = None
            self._stop_for_full_disk(error)
            return
        if record is not None and self.progress is not None:
            self.progress.on_record(report.nodeid, record.check, record.case.case_id, record.verdict)

    def _stop_for_full_disk(self, error: DiskFullError) -> None:
        """Stop after the test in flight with one line: where, how much to free, how to finish.
        Nothing more is written (a summary would mark the run complete or fail to write)."""
        remaining = max(self._selected - error.written, 0)
        needed = remaining * error.record_bytes + DISK_FULL_MARGIN_BYTES
        self._disk_full = (
            f"conformance: {error.folder}: no space left on the device after {error.written} records "
            f"of this run (every one kept, results.jsonl ends on a whole record); free about "
            f"{needed / 2**20:.1f} MiB there, then finish the run with --resume and the same options"
        )
        if self._session is not None:
            self._session.shouldstop = self._disk_full
        dsession = self.config.pluginmanager.get_plugin("dsession")  # xdist keeps its own flag
        if dsession is not None:
            dsession.shouldstop = self._disk_full

    def _pairwise(self) -> dict[str, Any]:
        """Per subject that plans cases: its pairwise coverage of optional inputs (the plan's
        cases, whatever -k selected: coverage is the plan's property)."""
        out = {}
        for subject in self.subjects:
            cases = tuple(
                dict.fromkeys(
                    item.case
                    for items in self.plan.values()
                    for item in items
                    if item.case.subject == subject.name and item.status != "unavailable"
                )
            )
            if cases:
                out[subject.name] = pairwise_coverage(subject, cases).as_record()
        return out

    # Before xdist's own, which waits for the workers to exit (seconds, after a large run): the
    # records and the report are written meanwhile (every result came in before this hook).
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._disk_full:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
            return
        if self.recorder is None:
            return
        summary = {
            "schema": SCHEMA_VERSION,
            "environment": environment_block(),
            "impl": self.impl,
            "subjects": [_subject_summary(s) for s in self.subjects],
            "profile": self.profile.name,
            "hypothesis_seed": self.seed,
            "shard": _shard_record(self.shard),
            "command": _command_line(),
        }
        results = read_results(self.report_dir).results  # this run and any resumed earlier one
        statuses = known_issues.ledger_status(
            self.ledger,
            results,
            self.versions,
            [s.name for s in self.subjects],
            narrowed=self._narrowed(),
        )
        for status in statuses:  # summaries get pasted into reviews: no absolute paths
            status["source"] = _display(Path(status["source"]), self.config.rootpath)
        summary["known_issues"] = statuses
        summary["pairwise"] = self._pairwise()
        summary["ledger_files"] = [_display(Path(f), self.config.rootpath) for f in self.ledger.files]
        # Checks that never ran (xdist out of worker restarts) leave the file incomplete, for --resume.
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED or isolation.unfinished(self.config) > 0
        self.recorder.finish(summary, interrupted=interrupted, results=results)
        self.recorder = None
        _render_report(self.report_dir, self.config)
        collect_only = bool(self.config.getoption("collectonly", False))  # listed, not run: judge nothing
        self._ledger_lines = _ledger_lines(statuses) + ([] if collect_only else _not_run_lines(results))
        # NO_TESTS_COLLECTED too: a -k that selects nothing checked nothing, and says so with one code (6).
        judged = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
        if exitstatus in judged and not collect_only:
            session.exitstatus = _exit_status(results, statuses, self.strict_known, interrupted)


def _targets_option(parse: Callable[[str], tuple[str, ...]], text: str) -> tuple[str, ...]:
    try:
        return parse(text)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def _shard_option(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        return shards.parse_shard(text)
    except shards.ShardSyntaxError as error:
        raise pytest.UsageError(str(error)) from None


def _require_shared_seed(profile: profiles.Profile, given_seed: Any, shard: tuple[int, int]) -> None:
    """Shards run on different machines must plan the same cases: a profile that draws its
    cases from a fresh random seed (dev, thorough) would give each shard other cases, and the
    merge would refuse them after the whole run. Refuse before anything runs instead."""
    if profile.derandomize or given_seed is not None:
        return
    raise pytest.UsageError(
        f"--shard {shard[0]}/{shard[1]} with --profile {profile.name} needs --hypothesis-seed N: "
        f"{profile.name} draws its cases from a random seed, and every shard must draw the same ones "
        "(pass the same seed to each shard, e.g. --hypothesis-seed 1234)"
    )


def _shard_record(shard: tuple[int, int] | None) -> dict[str, int] | None:
    """What the header and summary.json say about --shard (None: the whole plan)."""
    return None if shard is None else {"index": shard[0], "count": shard[1]}


def _shard_text(record: Any) -> str | None:
    """A recorded shard as the option spells it ("2/3"), or None."""
    return f"{record['index']}/{record['count']}" if isinstance(record, dict) else None


def _require_every_check(items: list[pytest.Item]) -> None:
    """Every module holding check tests defines one per declared check: a check whose test
    went missing would otherwise drop out of every run without a word."""
    modules = {item.module for item in items if _planned_of(item) is not None}
    for module in modules:
        missing = [c for c in CHECKS if not callable(getattr(module, f"test_{c}", None))]
        if missing:
            raise pytest.UsageError(
                f"{module.__file__}: declared checks {missing} collect no test; define them from the "
                "registry (conformance/test_checks.py does) or remove their declarations"
            )


def _exit_status(
    results: tuple[CaseResult, ...], statuses: list[dict[str, Any]], strict: bool, interrupted: bool
) -> int:
    """0 when every failure is known (and, with --strict-known, every entry still reproduces):
    the records decide, not pytest's outcomes, so a crash the ledger explains counts as known.
    EXIT_NOTHING_CHECKED when no check ran at all: a green that means "nothing ran" is no green.
    A run where some subjects ran is judged on what ran."""
    unexplained = any(r.verdict in known_issues.FAILING for r in results)
    if unexplained or interrupted or (strict and known_issues.strict_problems(statuses)):
        return pytest.ExitCode.TESTS_FAILED
    if nothing_checked(results):
        return EXIT_NOTHING_CHECKED
    return pytest.ExitCode.OK


def _not_run_lines(results: tuple[CaseResult, ...]) -> list[tuple[str, bool]]:
    """The terminal's NOT RUN line, with each subject's reason, when no check ran at all."""
    if not nothing_checked(results):
        return []
    reasons = not_checked_reasons(results)
    lines = [(f"conformance: NOT RUN: nothing was checked (exit {EXIT_NOTHING_CHECKED})", True)]
    if not results:
        lines.append(("conformance: no planned check was selected: -k, -m or --deselect left none", True))
    return lines + [(f"conformance: {subject}: {reason}", True) for subject, reason in reasons.items()]


def _ledger_lines(statuses: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Terminal lines about the ledger: what it explained, what no longer reproduces, what is stale."""
    lines = []
    reproduced = [s for s in statuses if s["status"] == "reproduced"]
    if reproduced:
        lines.append(
            (
                f"conformance: {sum(len(s['matched']) for s in reproduced)} failing checks are known "
                f"issues ({', '.join(s['id'] for s in reproduced)})",
                False,
            )
        )
    for s in statuses:
        if s["status"] in ("no longer reproduces", "stale"):
            lines.append(
                (
                    f"conformance: known issue {s['id']} {s['status']} ({s['source']}); "
                    "remove it or fix its selector",
                    False,
                )
            )
        elif s["status"] == "out of range" and s.get("failing_outside_range"):
            lines.append(
                (
                    f"conformance: known issue {s['id']} would explain {s['failing_outside_range']} "
                    f"failures here, outside its range jax {s['jax']}; widen its range if they are "
                    "the same defect",
                    True,
                )
            )
    return lines


def _display(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return path.name


def _command_line() -> str:
    """The command, with the home folder shown as ``~`` (summaries get pasted into reviews)."""
    home = str(Path.home())
    return " ".join(["pytest", *(arg.replace(home, "~") for arg in sys.argv[1:])])


def _planned_of(item: pytest.Item) -> Planned | None:
    """The item's planned check, or None (an empty parameter set gives pytest's NOTSET)."""
    planned = getattr(getattr(item, "callspec", None), "params", {}).get("planned")
    return planned if isinstance(planned, Planned) else None


def _subject_summary(subject: Subject) -> dict[str, Any]:
    return {
        "name": subject.name,
        "impl": subject.impl,
        "available": subject.available,
        "reason": "" if subject.available else subject.reason,
        "execution": subject.availability.execution,
        "execution_detail": subject.availability.execution_detail,
        "versions": dict(subject.availability.versions),
        WARNINGS: list(subject.warnings),  # raised while it was resolved (its module's import)
    }


def _render_report(report_dir: Path, config: pytest.Config) -> None:
    """Hook point for ``reports.run_report.render.write_report(report_dir)`` (report.md, plots)."""
    try:
        render = importlib.import_module("reports.run_report.render")
    except ImportError:
        return
    write_report = getattr(render, "write_report", None)
    if write_report is None:
        return
    try:
        write_report(report_dir, plots=not config.getoption("no_plots"))
    except Exception as error:  # noqa: BLE001 - results are already safe on disk; say why the report is not
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        message = f"conformance: report.md not written: {type(error).__name__}: {error}"
        if reporter is not None:
            reporter.write_line(message, red=True)
        else:
            print(message, file=sys.stderr)


class Bound:
    """The ``conformance`` fixture: runs one planned check for the current test item."""

    def __init__(self, plugin: ConformancePlugin, node: pytest.Item):
        self.plugin, self.node = plugin, node

    def check(self, planned: Planned) -> None:
        """Evaluate, attach the record, and turn the verdict into pytest's outcome."""
        self.node.user_properties.append(
            recording.case_property(
                case_description(planned.case), planned.check, isolation.planned_features(planned)
            )
        )
        result = self.plugin.classify_known(self.plugin.runner.evaluate(planned))
        self.node.user_properties.append(recording.result_property(result))
        if result.verdict in ("unsupported", "unavailable"):
            pytest.skip(f"{result.verdict}: {result.reason}")
        if result.verdict == "known":
            issue = result.known_issue
            # pytrace=False: pytest formats an xfail's traceback like a failure's before it reads
            # the outcome, parsing each frame's source file: 60 ms a known result, 2.8% of a
            # worker's time at --impl all. The reason shown is the same message.
            raise pytest.xfail.Exception(
                f"known issue {issue['id']} ({issue['link']}): {issue['summary']}", pytrace=False
            )
        if result.verdict != "pass":
            message = [f"{planned.check} {result.verdict.upper()}: {planned.case.summary()}", result.reason]
            if result.repro:
                from reports.run_report.render import repro_path  # stdlib only

                where = self.plugin.report_dir / repro_path(result)
                message += ["", f"Repro: {where} (written with report.md; see its first lines)"]
            pytest.fail("\n".join(message), pytrace=False)

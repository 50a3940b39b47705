"""The results file format: one JSON object per line, appended and flushed per case.

``results.jsonl`` in a session's report folder holds, in order:
  * one ``{"kind": "run", ...}`` header (schema version, subjects, profile, seed),
  * one ``{"kind": "case", ...}`` record per (case, check) as soon as it finishes,
  * one ``{"kind": "end", ...}`` footer when the run finished normally.
A file without the footer is *incomplete* (the run was killed) but still valid:
every line before the cut is usable. A torn final line is dropped and reported;
a bad line anywhere else is corruption and raises ``ResultsFileError`` naming the
file and line. Nothing here is ever unpickled: plain JSON only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from kernels.contract import features

# 2: a case is described generically (its fields by name, its words); 1 (read, never written):
# a fixed list of fields. A gate compares a folder of either against one of the other.
SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
LOCK_FILE = ".lock"  # held (fcntl.flock) by the run writing the folder; holds its pid
# ``CaseResult.details`` key set (to 1) by the leak and recompile checks when a subject declares
# no JAX runtime (``Capabilities.jax_runtime``) yet JAX compiled during its calls: the report says
# that the declaration contradicts what was observed.
UNDECLARED_JAX_RUNTIME = "jax_runtime_undeclared"
# ``CaseResult.availability`` key (and summary.json's, per subject): the distinct warnings the
# subject raised while the suite called it, one line each, "DeprecationWarning: <message>".
WARNINGS = "warnings"
# Where the runner records the shrunk case (``CaseResult.details``); older records say it
# only in the reason's last line, which the report reads as a fallback.
MINIMAL_CASE_KEY = "minimal_case_id"

Verdict = Literal["pass", "fail", "unsupported", "unavailable", "error", "known", "flaky"]
# known: failed (or errored) and matched by a known-issue ledger entry (``CaseResult.known_issue``);
# flaky: crashed or hung once, then ran normally when retried alone in a fresh process.
VERDICTS: tuple[str, ...] = ("pass", "fail", "unsupported", "unavailable", "error", "known", "flaky")


class ResultsFileError(ValueError):
    """A results file that cannot be read; the message names the file, the line and the fix."""


class DiskFullError(OSError):
    """The report folder's disk is full. Every record written before stays whole (the
    half-written one is cut), so ``--resume`` finishes the run once space is freed."""

    def __init__(self, folder: Path, written: int, record_bytes: int):
        super().__init__(errno.ENOSPC, f"{folder}: no space left on the device")
        self.folder = folder
        self.written = written  # records in results.jsonl, all whole
        self.record_bytes = record_bytes  # mean bytes per record so far (an estimate of what is needed)


# Write errors that mean "no space": the disk is full, or the user's quota is.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclasses.dataclass(frozen=True)
class CaseDescription:
    """Everything needed to rebuild a case: its id, subject, dtype, seed, every other field of
    ``conformance.plan.cases.Case`` by name (``fields``, sorted pairs), and its features in
    words (``kernels/contract/features.py``). A field reads as an attribute: ``description.q_len``."""

    case_id: str
    subject: str
    dtype: str
    seed: int = 0
    fields: tuple[tuple[str, Any], ...] = ()
    words: str = ""

    def __post_init__(self) -> None:
        pairs = self.fields.items() if isinstance(self.fields, dict) else self.fields
        object.__setattr__(self, "fields", tuple(sorted((str(k), _tuples(v)) for k, v in pairs)))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are no dataclass field: the case's own fields.
        if name.startswith("__"):
            raise AttributeError(name)
        for key, value in self.__dict__.get("fields", ()):
            if key == name:
                return value
        raise AttributeError(f"case {self.__dict__.get('case_id', '?')!r} has no field {name!r}")

    def get(self, name: str, default: Any = None) -> Any:
        return dict(self.fields).get(name, default)


def _description_to_json(case: CaseDescription) -> dict[str, Any]:
    return {
        "case_id": case.case_id,
        "subject": case.subject,
        "dtype": case.dtype,
        "seed": case.seed,
        "fields": dict(case.fields),
        "words": case.words,
    }


# Schema 1's flat case keys that were no field of the case: which masks were used and the
# bias's array shape (its broadcast pattern was not kept).
_SCHEMA1_SUMMARIES = ("masks", "bias_shape")


def _description_from_json(obj: dict[str, Any], schema: int) -> CaseDescription:
    if schema >= 2:
        return CaseDescription(**obj)
    core = {k: obj[k] for k in ("case_id", "subject", "dtype") if k in obj}
    rest = {k: _tuples(v) for k, v in obj.items() if k not in (*core, "seed")}
    # The features schema 1 kept under their own names read as the table says; the summaries
    # as they were.
    known = {f.name: f.default for f in features.case_fields()}
    view = SimpleNamespace(**{**known, **{k: v for k, v in rest.items() if k in known}})
    words = features.words(view) + [str(m).replace("_", " ") for m in rest.get("masks", ())]
    if rest.get("bias_shape") is not None:
        words.append(f"bias {list(rest['bias_shape'])}")
    return CaseDescription(**core, seed=obj.get("seed", 0), fields=rest, words=", ".join(words))


@dataclasses.dataclass(frozen=True)
class TensorMetrics:
    """Error of one output tensor against float64, next to the same-dtype baseline's error."""

    tensor: str  # "out", "lse", "dq", "dk", "dv", "dbias"
    max_abs: float
    mean_abs: float
    baseline_max_abs: float
    baseline_mean_abs: float
    ratio: float  # max_abs / baseline_max_abs: the headline number
    mean_ratio: float  # mean_abs / baseline_mean_abs: catches systematic drift
    k: float
    floor: float
    tolerance: float  # k * baseline_max_abs + floor
    worst_index: tuple[int, ...]
    worst_subject: float
    worst_reference: float
    fraction_out_of_tolerance: float
    passed: bool
    # The mean-abs rule (k_mean * baseline_mean_abs + floor_mean); None in records
    # written before it was stored, which then show only the max-abs rule.
    k_mean: float | None = None
    floor_mean: float | None = None
    mean_tolerance: float | None = None
    # The trivially wrong answers (all zeros, the reference negated, its rows or heads shifted by
    # one) that would have met this tolerance too: a judgement any of them meets cannot fail, so
    # its "passed" is no pass (``conformance.judge.tolerance.trivial_passes``). Empty: it can fail.
    weak: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class CaseResult:
    case: CaseDescription
    check: str  # "forward", "lse", "backward", "fully_masked", "shape_dtype", ...
    verdict: Verdict
    reason: str = ""
    metrics: tuple[TensorMetrics, ...] = ()
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    availability: dict[str, Any] = dataclasses.field(default_factory=dict)
    features: tuple[
        str, ...
    ] = ()  # grid columns this result counts towards, e.g. ("forward", "causal", "bfloat16")
    repro: str = ""  # standalone Python script that reproduces the case
    details: dict[str, Any] = dataclasses.field(default_factory=dict)  # check-specific measurements
    # The ledger entry that matched a failure (verdict "known"): {"id", "link", "summary"}.
    known_issue: dict[str, str] = dataclasses.field(default_factory=dict)
    # Behaviour seen where the semantics leave it open, e.g. {"fully_masked_out": "mean_v"}
    # (classes in docs/semantics.md); the gate reports a change as a behaviour change.
    observed: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.case.subject, self.case.case_id, self.check)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def case_result_to_json(result: CaseResult) -> dict[str, Any]:
    record = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    record["metrics"] = [dataclasses.asdict(m) for m in result.metrics]
    record["case"] = _description_to_json(result.case)
    return {"kind": "case", "schema": SCHEMA_VERSION, **record}


def case_result_from_json(obj: dict[str, Any]) -> CaseResult:
    case = _description_from_json(obj["case"], obj.get("schema", SCHEMA_VERSION))
    metrics = tuple(TensorMetrics(**{k: _tuples(v) for k, v in m.items()}) for m in obj.get("metrics", ()))
    fields = {f.name for f in dataclasses.fields(CaseResult)} - {"case", "metrics"}
    rest = {k: _tuples(v) if k == "features" else v for k, v in obj.items() if k in fields}
    return CaseResult(case=case, metrics=metrics, **rest)


@dataclasses.dataclass(frozen=True)
class ResultsFile:
    path: Path
    header: dict[str, Any]
    results: tuple[CaseResult, ...]
    footer: dict[str, Any] | None
    torn_last_line: bool

    @property
    def complete(self) -> bool:
        return self.footer is not None and not self.torn_last_line


class ResultsWriter:
    """Appends records to ``results.jsonl``, flushing each one to the OS so a ``kill -9``
    loses at most the case in flight. fsync (against a machine crash) runs at most once a
    second and on finish/close: one per record cost ~10 ms each on a busy disk, 7% of a
    ci run (measured with ``benchmarks.suite_speed``)."""

    FSYNC_INTERVAL_S = 1.0

    def __init__(self, folder: Path, header: dict[str, Any], *, append: bool = False):
        self.path = Path(folder) / RESULTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        resuming = append and self.path.exists() and self.path.stat().st_size > 0
        self._file = self.path.open("a" if resuming else "w", encoding="utf-8")
        self._synced = 0.0  # time.monotonic() of the last fsync
        if resuming:
            _drop_torn_tail(self.path, self._file)
        self.records = 0
        self.record_bytes = 0
        self._write({"kind": "run", "schema": SCHEMA_VERSION, "resumed": resuming, **header})

    def _write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, sort_keys=True, allow_nan=True) + "\n"
        end = self._file.tell()
        try:
            self._file.write(line)
            self._file.flush()
            if time.monotonic() - self._synced >= self.FSYNC_INTERVAL_S:
                self._sync()
        except OSError as error:
            if error.errno not in NO_SPACE_ERRNOS:
                raise
            self._cut(end)
            mean = self.record_bytes // self.records if self.records else len(line)
            raise DiskFullError(self.path.parent, self.records, max(mean, len(line))) from None
        if obj.get("kind") == "case":
            self.records += 1
            self.record_bytes += len(line)

    def _cut(self, end: int) -> None:
        """Drop what the failed write left past ``end``; the file then ends on a whole record.
        Buffered bytes that could not be written are discarded with the handle."""
        with contextlib.suppress(OSError):
            os.truncate(self.path, end)
        with contextlib.suppress(OSError, ValueError):
            self._file.close()

    def _sync(self) -> None:
        os.fsync(self._file.fileno())
        self._synced = time.monotonic()

    def append(self, result: CaseResult) -> None:
        self._write(case_result_to_json(result))

    def finish(self, footer: dict[str, Any] | None = None) -> None:
        self._write({"kind": "end", "schema": SCHEMA_VERSION, **(footer or {})})
        self._sync()
        self._file.close()

    def close(self) -> None:
        """Close without a footer (the run stays marked incomplete)."""
        if not self._file.closed:
            self._sync()
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed


def _drop_torn_tail(path: Path, handle) -> None:
    """On resume, cut a half-written last line so the next record starts on its own line."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        handle.truncate(data.rfind(b"\n") + 1)
        handle.seek(0, os.SEEK_END)


def read_results(path: Path) -> ResultsFile:
    """Read a results.jsonl (or the folder holding one). Raises ResultsFileError on
    a missing, empty, corrupt or wrong-schema file; a torn last line is tolerated."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.exists():
        raise ResultsFileError(
            f"{path}: no results file; run `nox -s conformance` to produce one, or pass the right folder"
        )
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    torn = lines[-1] != ""
    if not torn:
        lines = lines[:-1]
    if not any(line.strip() for line in lines):
        raise ResultsFileError(f"{path}: the results file is empty; the run wrote nothing, rerun it")
    header: dict[str, Any] | None = None
    footer: dict[str, Any] | None = None
    results: dict[tuple[str, str, str], CaseResult] = {}
    for number, line in enumerate(lines, start=1):
        is_last = number == len(lines)
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            if is_last and torn:
                break  # a run killed mid-write: everything before it stands
            raise ResultsFileError(
                f"{path}:{number}: corrupt line ({exc}); delete that line or rerun the case with --resume"
            ) from None
        if obj.get("schema") not in READABLE_SCHEMAS:
            raise ResultsFileError(
                f"{path}:{number}: schema version {obj.get('schema')!r}, this tool reads "
                f"{', '.join(map(str, READABLE_SCHEMAS))}; "
                "regenerate the results with this version of the suite"
            )
        kind = obj.get("kind")
        try:
            if kind == "run":
                header = header or obj
                footer = None  # a resumed run must finish again to count as complete
            elif kind == "end":
                footer = obj
            elif kind == "case":
                result = case_result_from_json(obj)
                results[result.key] = result  # a resumed rerun of a case supersedes the old record
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsFileError(
                f"{path}:{number}: malformed {kind} record ({exc}); regenerate the results"
            ) from None
    if header is None:
        raise ResultsFileError(f"{path}:1: no run header; this is not a results file written by the suite")
    return ResultsFile(
        path=path, header=header, results=tuple(results.values()), footer=footer, torn_last_line=torn
    )


def read_json_file(path: Path, what: str, fix: str) -> Any:
    """A JSON file's content; None when it does not exist. An empty or corrupt file raises
    ResultsFileError naming the file, the line and ``fix`` (what the user should do)."""
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise ResultsFileError(f"{path}:1: the {what} file is empty; {fix}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"{path}:{exc.lineno}: corrupt {what} JSON ({exc.msg}); {fix}") from None


def read_summary(path: Path) -> dict[str, Any] | None:
    """Read a summary.json (or the folder holding one); None when there is none,
    as after a killed run. Raises ResultsFileError on anything but a JSON object."""
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    obj = read_json_file(path, "summary", "delete it or rerun the session")
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ResultsFileError(f"{path}:1: the summary is not a JSON object; delete it or rerun the session")
    return obj


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON via a temporary file and rename, so readers never see half a file."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_text_atomic(path: Path, text: str, *, sync: bool = True) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), sync=sync)


def write_bytes_atomic(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write via a temporary file in the same folder and rename; on any failure the
    old file (if any) stays as it was and the temporary file is removed. ``sync=False`` skips the
    fsync, for files rendered again from the records (a crash may leave one empty, never torn)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def lock_holder(folder: Path) -> int | None:
    """The pid of the live run writing ``folder`` (0 when it wrote none yet), or None when
    no run holds the folder's lock. Asks the lock itself, not the pid: the kernel drops a
    dead holder's lock, and a stale pid may belong to another process by now."""
    path = Path(folder) / LOCK_FILE
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = handle.read().strip()
            return int(text) if text.isdigit() else 0
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def completed_keys(results: Iterable[CaseResult]) -> set[tuple[str, str, str]]:
    """Keys already recorded, for ``--resume``."""
    return {r.key for r in results}

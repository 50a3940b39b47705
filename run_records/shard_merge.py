"""``python -m reports merge OUT IN...``: the folders of one ``--shard K/N`` run, as one folder.

The merged folder reads like an unsharded run's: one ``results.jsonl`` (shard 1's header
without its shard, every shard's records, an ``end`` footer only when every shard
finished) and one ``summary.json`` (counts summed, known-issue statuses combined), so
``render``, ``gate`` and ``matrix`` take it as they take any other. Standard library only.

Refused, in one line (``MergeError``): folders of different runs (profile, seed, --impl,
subjects, JAX version or suite revision differ), a folder that is not a shard, a missing
or repeated shard, a (subject, case, check) recorded by two folders, and a folder another
process is writing (its ``.lock`` names a live pid). A shard killed mid-run makes the
merged folder incomplete, as the killed run itself is.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from run_records.folder_lock import FolderBusyError, FolderLock
from run_records.results_file import (
    RESULTS_FILE,
    SCHEMA_VERSION,
    SUMMARY_FILE,
    VERDICTS,
    ResultsFile,
    case_result_to_json,
    lock_holder,
    read_results,
    read_summary,
    write_json_atomic,
    write_text_atomic,
)
from versions import table

# What makes two folders shards of one run, read from each results header.
RUN_IDENTITY = (
    ("profile", "--profile"),
    ("hypothesis_seed", "--hypothesis-seed"),
    ("impl", "--impl"),
    ("subjects", "subjects"),
    *((library.name, f"{library.name} version") for library in table.LIBRARIES),
    ("git_revision", "suite revision"),
)
# A known issue's combined status: the first that any shard reports wins (see _combine_status).
_STATUS_ORDER = ("reproduced", "no longer reproduces")


class MergeError(ValueError):
    """Folders that cannot be merged; the message is one line naming the folder and the fix."""


@dataclasses.dataclass(frozen=True)
class Shard:
    folder: Path
    results: ResultsFile
    summary: dict[str, Any] | None
    index: int
    count: int

    @property
    def complete(self) -> bool:
        return self.results.complete and self.summary is not None and self.summary.get("complete") is True


@dataclasses.dataclass(frozen=True)
class Merged:
    folder: Path
    shards: int
    checks: int
    complete: bool


def _refuse_if_locked(folder: Path) -> None:
    pid = lock_holder(folder)  # asks the lock itself (fcntl), so a stale pid never blocks
    if pid is not None:
        raise MergeError(f"{folder} is being written by pid {pid}; wait for it to finish")


def _identity(header: dict[str, Any]) -> dict[str, Any]:
    env = header.get("environment") or {}
    return {
        "profile": header.get("profile"),
        "hypothesis_seed": header.get("hypothesis_seed"),
        "impl": header.get("impl"),
        "subjects": header.get("subjects"),
        **{
            library.name: (env.get("libraries") or {}).get(library.distribution)
            for library in table.LIBRARIES
        },
        "git_revision": env.get("git_revision"),
    }


def _read_shard(folder: Path) -> Shard:
    results = read_results(folder)
    shard = results.header.get("shard")
    if not isinstance(shard, dict) or not isinstance(shard.get("index"), int):
        raise MergeError(
            f"{folder}: not a sharded run (its header records no --shard K/N); merge only the folders "
            "of one run started with --shard 1/N ... N/N"
        )
    return Shard(Path(folder), results, read_summary(folder), shard["index"], int(shard.get("count", 0)))


def _check_same_run(shards: Sequence[Shard]) -> None:
    first = shards[0]
    ours = _identity(first.results.header)
    for shard in shards[1:]:
        theirs = _identity(shard.results.header)
        for key, label in RUN_IDENTITY:
            if theirs[key] != ours[key]:
                raise MergeError(
                    f"{shard.folder} is from a different run: {label} {theirs[key]!r}, but {first.folder} "
                    f"has {ours[key]!r}; merge only the shards of one run (same --profile, "
                    "--hypothesis-seed, --impl, JAX, tokamax and suite revision)"
                )


def _check_shard_set(shards: Sequence[Shard]) -> int:
    counts = sorted({s.count for s in shards})
    if len(counts) != 1:
        raise MergeError(
            f"the folders are shards of different splits (of {', '.join(map(str, counts))}); "
            "merge the shards of one --shard K/N run"
        )
    count = counts[0]
    seen: dict[int, Path] = {}
    for shard in shards:
        if shard.index in seen:
            raise MergeError(
                f"shard {shard.index} of {count} given twice ({seen[shard.index]} and {shard.folder}); "
                "pass each shard's folder once"
            )
        seen[shard.index] = shard.folder
    missing = [k for k in range(1, count + 1) if k not in seen]
    if missing:
        which = ", ".join(map(str, missing))
        raise MergeError(
            f"shard{'s' if len(missing) > 1 else ''} {which} of {count} missing; "
            f"pass every shard's folder (run the missing one with --shard {missing[0]}/{count})"
        )
    return count


def _check_disjoint(shards: Sequence[Shard]) -> None:
    owner: dict[tuple[str, str, str], Path] = {}
    for shard in shards:
        for result in shard.results.results:
            if result.key in owner:
                subject, case_id, check = result.key
                raise MergeError(
                    f"{check}[{case_id}] of {subject} is recorded in both {owner[result.key]} and "
                    f"{shard.folder}; the folders overlap (not shards of one --shard K/N run?)"
                )
            owner[result.key] = shard.folder


def _combine_status(entries: list[dict[str, Any]], shards_with_subject: list[bool]) -> dict[str, Any]:
    """One known-issue entry over the shards (``conformance.judge.known_issues.ledger_status``'s rules):
    reproduced anywhere wins, then "no longer reproduces"; out of range is the same in every shard
    (one JAX); "stale" only if every shard that ran the subject found nothing its selector names."""
    merged = dict(entries[0])
    merged["matched"] = sorted({m for e in entries for m in e.get("matched", ())})
    statuses = [e.get("status") for e in entries]
    if all(s == "out of range" for s in statuses):
        merged["failing_outside_range"] = sum(e.get("failing_outside_range", 0) for e in entries)
        return merged
    for status in _STATUS_ORDER:
        if status in statuses:
            merged["status"] = status
            if status == "no longer reproduces":
                merged["passing"] = sum(e.get("passing", 0) for e in entries)
            return merged
    ran_here = [s for s, has in zip(statuses, shards_with_subject, strict=True) if has]
    merged["status"] = "stale" if ran_here and all(s == "stale" for s in ran_here) else "not run here"
    merged.pop("passing", None)
    return merged


def _known_issues(shards: Sequence[Shard]) -> list[dict[str, Any]]:
    summaries = [s for s in shards if s.summary is not None]
    by_id: dict[str, list[tuple[dict[str, Any], Shard]]] = {}
    for shard in summaries:
        for entry in shard.summary.get("known_issues", ()):
            by_id.setdefault(entry["id"], []).append((entry, shard))
    combined = []
    for pairs in by_id.values():
        entries = [e for e, _ in pairs]
        subject = entries[0].get("subject")
        with_subject = [
            any(r.case.subject == subject and r.verdict != "unavailable" for r in s.results.results)
            for _, s in pairs
        ]
        combined.append(_combine_status(entries, with_subject))
    return combined


def _summary(shards: Sequence[Shard], complete: bool) -> dict[str, Any] | None:
    summaries = [s.summary for s in shards if s.summary is not None]
    if not summaries:
        return None  # every shard was killed: a killed run leaves no summary either
    counts: Counter[str] = Counter()
    for summary in summaries:
        counts.update(summary.get("counts", {}))
    all_runs = Counter(r.verdict for s in shards for r in s.results.results)
    return {
        **summaries[0],
        "shard": None,
        "merged_shards": [
            {
                "index": s.index,
                "count": s.count,
                "complete": s.complete,
                "command": (s.summary or {}).get("command"),
            }
            for s in shards
        ],
        "counts": dict(counts),
        "counts_all_runs": {v: all_runs.get(v, 0) for v in VERDICTS},
        "duration_s": round(sum(float(s.get("duration_s", 0.0)) for s in summaries), 3),
        "known_issues": _known_issues(shards),
        "ledger_files": sorted({f for s in summaries for f in s.get("ledger_files", ())}),
        "complete": complete,
    }


def _results_text(shards: Sequence[Shard], complete: bool, summary: dict[str, Any] | None) -> str:
    header = {**shards[0].results.header, "shard": None, "merged_shards": len(shards)}
    header["resumed"] = any(s.results.header.get("resumed") for s in shards)
    lines = [header]
    lines += [case_result_to_json(r) for s in shards for r in s.results.results]
    if complete:
        footer: dict[str, Any] = {"kind": "end", "schema": SCHEMA_VERSION}
        if summary is not None:
            footer.update(counts=summary["counts"], duration_s=summary["duration_s"])
        lines.append(footer)
    return "".join(json.dumps(obj, sort_keys=True, allow_nan=True) + "\n" for obj in lines)


def merge(out: Path, inputs: Sequence[Path]) -> Merged:
    """Merge the shard folders ``inputs`` into ``out``. Raises MergeError (or ResultsFileError
    for an unreadable folder) before writing anything."""
    out = Path(out)
    if not inputs:
        raise MergeError("give the shard folders to merge: python -m reports merge OUT SHARD1 SHARD2 ...")
    for folder in (out, *inputs):
        _refuse_if_locked(Path(folder))
    resolved_out = out.resolve()
    for folder in inputs:
        if Path(folder).resolve() == resolved_out:
            raise MergeError(f"{folder}: the output folder is one of the inputs; merge into a new folder")
    shards = sorted((_read_shard(Path(f)) for f in inputs), key=lambda s: s.index)
    _check_same_run(shards)
    count = _check_shard_set(shards)
    _check_disjoint(shards)
    complete = all(s.complete for s in shards)
    summary = _summary(shards, complete)
    try:
        lock = FolderLock(out).acquire()  # a run or another merge starting on OUT now is refused
    except FolderBusyError as error:
        raise MergeError(str(error)) from None
    try:
        write_text_atomic(out / RESULTS_FILE, _results_text(shards, complete, summary))
        summary_path = out / SUMMARY_FILE
        if summary is not None:
            write_json_atomic(summary_path, summary)
        elif summary_path.exists():
            summary_path.unlink()  # a stale summary from an earlier merge would contradict the records
    finally:
        lock.release()
    checks = sum(len(s.results.results) for s in shards)
    return Merged(out, count, checks, complete)

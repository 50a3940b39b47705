"""``python -m reports bisect``: the first JAX release (or tokamax release, at a fixed JAX) where
one check of one case starts (or stops) failing, through nox's per-version environments and the
suite's own run.

    nox -s bisect -- --impl xla --case CASE_ID --check forward --good 0.8.3 --bad 0.7.2
    nox -s bisect -- --library tokamax --jax 0.10.2 --impl 'tokamax[impl=xla]' --case CASE_ID \
        --good 0.0.10 --bad 0.0.12

Prints one line per tested release, then ``first fixed release: A (last bad: B)`` (or
``first bad release: ...``) and the environments it created, and writes ``OUT/bisect.json``
beside each release's report folder (``OUT/jax-X/``, or ``OUT/jax-X-tokamax-Y/``). Exit 0: found;
2: bad input or a bisection that cannot start (one line naming the fix).
"""

from __future__ import annotations

import argparse
import difflib
import shlex
import sys
import time
from pathlib import Path

from reports import jax_versions
from reports.bisection import installs, release_versions, search
from reports.ledger import range_edit
from run_records.ledger_file import BUILTIN_LEDGER
from run_records.results_file import write_json_atomic, write_text_atomic

EXIT_BAD_INPUT = 2
# Not imported from conformance.judge.known_issues: reports sit below the suite (docs/architecture.md),
# and `python -m reports` (the gate) must run on the standard library alone.


def add_parser(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "bisect",
        help="the first JAX (or tokamax) release where one check of one case starts (or stops) failing",
        description="Binary-search the releases of --library (JAX, or tokamax at the fixed --jax) from "
        "--good to --bad, each in nox's environment for that version, running only that check of that "
        "case. --good and --bad may come in either order: good older than bad finds the first bad "
        "release, good newer than bad the first fixed one. Exit 0: found; 2: bad input or a bisection "
        "that cannot start.",
    )
    cmd.add_argument(
        "--library",
        choices=installs.LIBRARIES,
        default="jax",
        help="the library whose releases are walked (default %(default)s); tokamax needs --jax",
    )
    cmd.add_argument(
        "--jax",
        default=None,
        metavar="X",
        help="with --library tokamax: the jax held fixed (each step: conformance(jax=X, tokamax=Y))",
    )
    cmd.add_argument("--impl", required=True, help="the subject, as the run names it (e.g. xla, tpu_flash)")
    cmd.add_argument(
        "--case", required=True, dest="case_id", metavar="CASE_ID", help="a case id from results.jsonl"
    )
    cmd.add_argument("--check", default="forward", help="the check to bisect (default %(default)s)")
    cmd.add_argument("--good", required=True, help="a release where the check passes")
    cmd.add_argument("--bad", required=True, help="a release where it fails (fail, known or error)")
    cmd.add_argument(
        "--versions",
        default=None,
        help="the releases, comma-separated, instead of asking the package index (offline)",
    )
    cmd.add_argument(
        "--profile", default="ci", help="the profile whose plan holds the case (default %(default)s)"
    )
    cmd.add_argument(
        "--known-issue",
        default=None,
        metavar="ID",
        help="write the answer into this ledger entry's --library range (jax or tokamax; prints the diff)",
    )
    cmd.add_argument(
        "--ledger",
        type=Path,
        default=BUILTIN_LEDGER,
        help="the ledger --known-issue edits (default: built-in)",
    )
    cmd.add_argument(
        "--out",
        type=Path,
        default=Path("reports/bisect"),
        help="bisect.json and each release's report folder",
    )
    cmd.add_argument(
        "--envdir", type=Path, default=installs.ROOT / ".nox", help="nox's environments (default: .nox)"
    )
    cmd.add_argument("--nox", default=None, help="the command that runs nox (default: nox on PATH)")
    cmd.add_argument(
        "--pytest-args", default="", help="more options for each run, e.g. '--hypothesis-seed 3'"
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (
        search.BisectError,
        release_versions.VersionListError,
        range_edit.LedgerEditError,
        FileNotFoundError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def walk_of(args: argparse.Namespace) -> installs.Walk:
    """The library walked, from --library and --jax; BisectError (one line, the fix) when they disagree,
    or when --good or --bad is a tokamax release that needs a newer jax than the one held fixed."""
    if args.library == "tokamax":
        if not args.jax:
            raise search.BisectError(
                "--library tokamax walks tokamax releases at one fixed jax: give it, e.g. --jax 0.10.2"
            )
        problem = jax_versions.version_problem(args.jax)
        for end in (args.good, args.bad):
            problem = problem or (
                jax_versions.tokamax_needs(end) and jax_versions.tokamax_problem(end, args.jax)
            )
        if problem:
            raise search.BisectError(f"{problem} (--jax {args.jax} is held fixed: pick a newer --jax)")
        return installs.Walk("tokamax", args.jax)
    if args.jax:
        raise search.BisectError(
            f"--jax {args.jax} holds jax fixed for a walk over tokamax releases: add --library tokamax, "
            "or drop --jax to walk jax releases"
        )
    return installs.Walk()


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    walk = walk_of(args)
    ledger_text = None
    if args.known_issue:  # before hours of installs: the entry must exist
        ledger_text = args.ledger.read_text(encoding="utf-8")
        range_edit.entry_range(ledger_text, args.known_issue, walk.library)
    if args.versions:
        versions = release_versions.parse_offline(args.versions)
    else:
        versions = release_versions.index_versions(walk.library)
    problem = search.input_problem(versions, args.good, args.bad, walk.library)
    if problem:
        raise search.BisectError(problem)
    span = release_versions.between(versions, args.good, args.bad)
    fixed = f" at jax {walk.jax}" if walk.jax else ""
    print(
        f"bisect: check {args.check} of {args.case_id} (--impl {args.impl}); {walk.library} releases{fixed}: "
        f"good {args.good}, bad {args.bad}; {len(span)} releases: {', '.join(span)}",
        flush=True,
    )
    installer = installs.NoxInstaller(
        nox=installs.nox_command(shlex.split(args.nox) if args.nox else None),
        envdir=args.envdir.resolve(),
        logs=(args.out / "logs").resolve(),
        walk=walk,
    )
    runner = installs.SuiteRunner(
        envdir=args.envdir.resolve(),
        impl=args.impl,
        case_id=args.case_id,
        check=args.check,
        out=args.out.resolve(),
        profile=args.profile,
        pytest_args=tuple(shlex.split(args.pytest_args)),
        walk=walk,
    )
    result = search.bisect(
        versions, args.good, args.bad, _say_install(installer, walk), _say_run(runner, walk), walk.library
    )
    print(f"tokamax (jax {walk.jax} fixed): {result.headline()}" if walk.jax else result.headline())
    fresh = [f"{s.version} ({s.install.seconds:.0f} s)" for s in result.steps if s.install.fresh]
    reused = [s.version for s in result.steps if not s.install.fresh]
    print(f"installs made: {', '.join(fresh) or 'none'}; environments reused: {', '.join(reused) or 'none'}")
    body = {
        "schema": 1,
        "impl": args.impl,
        "case_id": args.case_id,
        "check": args.check,
        "profile": args.profile,
        "library": walk.library,
        "jax": walk.jax,  # the jax held fixed in a tokamax walk; None when jax releases were walked
        **search.to_json(result),
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.known_issue:
        body["known_issue"] = _edit_ledger(args.ledger, ledger_text, args.known_issue, result, walk.library)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "bisect.json", body)
    print(f"wrote {args.out / 'bisect.json'} ({body['wall_s']:.0f} s)")
    return 0


def _say_install(installer: search.Installer, walk: installs.Walk) -> search.Installer:
    def install(version: str) -> search.Install:
        print(f"{walk.describe(version)}: installing ...", flush=True)
        done = installer(version)
        word = "installed" if done.fresh else "environment reused"
        state = f"{word} ({done.seconds:.0f} s)" if done.ok else f"SKIP: {done.reason}"
        print(f"{walk.describe(version)}: {state}", flush=True)
        return done

    return install


def _say_run(runner: search.Runner, walk: installs.Walk) -> search.Runner:
    def run_case(version: str) -> search.Observation:
        seen = runner(version)
        state = search.state_of(seen)
        what = f"{seen.verdict}, ratio {search.format_ratio(seen.ratio)}" if seen.verdict else seen.reason
        print(f"{walk.describe(version)}: {what} -> {state} ({seen.seconds:.0f} s)", flush=True)
        return seen

    return run_case


def _edit_ledger(
    path: Path, text: str, issue_id: str, result: search.BisectResult, key: str = "jax"
) -> dict[str, str]:
    """Write the answer into the entry's range of the library walked (``key``: jax or tokamax);
    prints the diff. Returns what bisect.json records."""
    old = range_edit.entry_range(text, issue_id, key)
    failing = [s.version for s in result.steps if s.state == "bad"]
    value = range_edit.new_range(old, result.direction, result.first, failing)
    edited = range_edit.set_range(text, issue_id, value, key)
    if edited == text:
        print(f"known issue {issue_id}: {key} range already {value!r}")
    else:
        write_text_atomic(path, edited)
        diff = difflib.unified_diff(
            text.splitlines(keepends=True), edited.splitlines(keepends=True), str(path), str(path)
        )
        print(f"known issue {issue_id}: {key} {old!r} -> {value!r}\n{''.join(diff)}", end="")
    return {"id": issue_id, "ledger": str(path), f"{key}_before": old or "", f"{key}_after": value}

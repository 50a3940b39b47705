"""Command line: ``python -m reports render DIR | matrix [ROOT] | gate BASE CANDIDATE | merge OUT IN...``.

``ledger-sweep DIR...``: where each known issue reproduced, one conformance run per release
(``reports/ledger/release_sweep.py``), and the range that says so.

Also ``bisect --impl S --case ID --good X --bad Y``: it finds the first JAX release where a check starts
(or stops) failing (``reports/bisection/command.py``).

Bad input (a missing, empty, torn, corrupt or wrong-schema file) prints one line
naming the file, the line and the fix, and exits 2; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from reports.bisection import command
from reports.gate.gate import EXIT_BAD_INPUT, Thresholds, gate, render_gate
from reports.matrix_report.version_matrix import MATRIX_DIR, write_matrix
from reports.records.results_file import ResultsFileError, write_text_atomic
from reports.records.shard_merge import MergeError, merge
from reports.run_report.render import write_report


def _fraction(text: str) -> float:
    """A threshold: '0.25' or '25%'."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (write 0.25 or 25%)") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _count(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def parser() -> argparse.ArgumentParser:
    defaults = Thresholds()
    top = argparse.ArgumentParser(prog="python -m reports", description=__doc__.split("\n")[0])
    commands = top.add_subparsers(dest="command", required=True)

    render = commands.add_parser("render", help="write DIR/report.md (and its plot) from DIR/results.jsonl")
    render.add_argument("dir", type=Path)
    render.add_argument("--no-plots", action="store_true", help="skip the PNG plot")

    matrix = commands.add_parser("matrix", help="one report over every ROOT/jax-*/ folder")
    matrix.add_argument("root", type=Path, nargs="?", default=Path("reports"))
    matrix.add_argument("--out", type=Path, default=None, help=f"output folder (default ROOT/{MATRIX_DIR})")
    matrix.add_argument("--no-plots", action="store_true")

    merge_cmd = commands.add_parser(
        "merge",
        help="merge the folders of one --shard K/N run into OUT (then rendered like any run)",
        description="Exit 0: merged. 2: the folders are not the complete, disjoint shards of one run.",
    )
    merge_cmd.add_argument("out", type=Path)
    merge_cmd.add_argument("inputs", type=Path, nargs="+", metavar="in")
    merge_cmd.add_argument("--no-plots", action="store_true", help="skip the PNG plot")

    command.add_parser(commands)

    sweep = commands.add_parser(
        "ledger-sweep",
        help="per known issue: the releases it reproduced at across one run per release, and its range",
    )
    sweep.add_argument("dirs", type=Path, nargs="+", metavar="dir")

    gate_cmd = commands.add_parser(
        "gate",
        help="compare CANDIDATE against BASE; exit 1 on a regression, 2 on bad input",
        description="Exit 0: no regression. 1: a regression (or an incomplete run). 2: unreadable input.",
    )
    gate_cmd.add_argument("base", type=Path)
    gate_cmd.add_argument("candidate", type=Path)
    gate_cmd.add_argument(
        "--ratio-drift",
        type=_fraction,
        default=defaults.ratio_drift,
        help="systematic drift: the median per-case growth of a group's error ratios "
        "(subject x dtype x tensor x max/mean, checks both pass) that fails the gate "
        "(default %(default)s = +50%%)",
    )
    gate_cmd.add_argument(
        "--drift-confidence",
        type=_fraction,
        default=defaults.drift_confidence,
        help="confidence that a group's median change exceeds --ratio-drift (a sign-test bound, "
        "so noise in a few cases does not fail the gate; default %(default)s)",
    )
    gate_cmd.add_argument(
        "--drift-min-cases",
        type=_count,
        default=defaults.drift_min_cases,
        help="smallest group the systematic rule judges (default %(default)s)",
    )
    gate_cmd.add_argument(
        "--near-tolerance",
        type=_fraction,
        default=defaults.near_tolerance,
        help="a single case fails when its error rises above this share of its tolerance ... "
        "(default %(default)s)",
    )
    gate_cmd.add_argument(
        "--well-below",
        type=_fraction,
        default=defaults.well_below,
        help="... from below this share in the base (default %(default)s)",
    )
    gate_cmd.add_argument(
        "--max-slowdown",
        type=_fraction,
        default=defaults.max_slowdown,
        help="relative growth of a benchmark's median time that fails the gate (default %(default)s)",
    )
    gate_cmd.add_argument(
        "--max-memory-growth",
        type=_fraction,
        default=defaults.max_memory_growth,
        help="relative growth of a benchmark's peak memory that fails the gate (default %(default)s)",
    )
    gate_cmd.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="judge an incomplete (killed) run on the checks it recorded instead of failing it",
    )
    gate_cmd.add_argument(
        "--allow-behaviour-change",
        action="store_true",
        help="list a change of observed behaviour where the semantics are open (e.g. what a fully "
        "masked row returns) as a note instead of failing the gate",
    )
    gate_cmd.add_argument(
        "--output", type=Path, default=None, help="also write the verdict to this Markdown file"
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "render":
            print(write_report(args.dir, plots=not args.no_plots))
            return 0
        if args.command == "matrix":
            print(write_matrix(args.root, args.out, plots=not args.no_plots))
            return 0
        if args.command == "bisect":
            return command.run(args)
        if args.command == "ledger-sweep":
            from reports.ledger import release_sweep  # packaging: the gate itself runs on the stdlib alone

            print(release_sweep.table(release_sweep.reproducing(args.dirs)))
            return 0
        if args.command == "merge":
            merged = merge(args.out, args.inputs)
            state = "complete" if merged.complete else "INCOMPLETE (a shard did not finish)"
            print(f"merged {merged.shards} shards, {merged.checks} checks, {state}: {merged.folder}")
            print(write_report(merged.folder, plots=not args.no_plots))
            return 0
        try:
            thresholds = Thresholds(
                ratio_drift=args.ratio_drift,
                drift_confidence=args.drift_confidence,
                drift_min_cases=args.drift_min_cases,
                near_tolerance=args.near_tolerance,
                well_below=args.well_below,
                max_slowdown=args.max_slowdown,
                max_memory_growth=args.max_memory_growth,
                allow_incomplete=args.allow_incomplete,
                allow_behaviour_change=args.allow_behaviour_change,
            )
        except ValueError as exc:  # thresholds that contradict each other: one line, exit 2
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        result = gate(args.base, args.candidate, thresholds)
    except (ResultsFileError, MergeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # unreadable or unwritable path: still one line, never a traceback
        print(
            f"error: {exc.filename or ''}: {exc.strerror or exc}; check the path and its permissions",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    text = render_gate(result)
    if args.output:
        write_text_atomic(args.output, text)
    print(text)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())

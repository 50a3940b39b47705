"""Command line: ``python -m reports render DIR | matrix [ROOT] | gate BASE CANDIDATE | merge OUT IN...``.

``floor-audit DIR [--over 10]``: where a tolerance's floor, not the careful baseline's error, decides
a pass (``reports/floor_audit.py``).

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

from reports.bisection import command as bisect_command
from reports.gate.comparison import gate
from reports.gate.findings import EXIT_BAD_INPUT
from reports.gate.thresholds import add_threshold_options, thresholds_from_args
from reports.gate.verdict_markdown import render_gate
from reports.matrix_report.version_matrix import MATRIX_DIR, write_matrix
from reports.run_report.render import write_report
from run_records.results_file import ResultsFileError, write_text_atomic
from run_records.shard_merge import MergeError, merge


def parser() -> argparse.ArgumentParser:
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

    bisect_command.add_parser(commands)

    sweep = commands.add_parser(
        "ledger-sweep",
        help="per known issue: the releases it reproduced at across one run per release, and its range",
    )
    sweep.add_argument("dirs", type=Path, nargs="+", metavar="dir")

    floors = commands.add_parser(
        "floor-audit",
        help="per subject, dtype and tensor: the passes whose floor is far above k x the baseline's error",
    )
    floors.add_argument("dir", type=Path)
    floors.add_argument("--over", type=float, default=10.0, help="list floors above this x k x baseline")

    gate_cmd = commands.add_parser(
        "gate",
        help="compare CANDIDATE against BASE; exit 1 on a regression, 2 on bad input",
        description="Exit 0: no regression. 1: a regression (or an incomplete run). 2: unreadable input.",
    )
    gate_cmd.add_argument("base", type=Path)
    gate_cmd.add_argument("candidate", type=Path)
    add_threshold_options(gate_cmd)  # one option per declared threshold (reports/gate/thresholds.py)
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
            return bisect_command.run(args)
        if args.command == "ledger-sweep":
            from reports.ledger import release_sweep  # packaging: the gate itself runs on the stdlib alone

            print(release_sweep.table(release_sweep.reproducing(args.dirs)))
            return 0
        if args.command == "floor-audit":
            from reports import floor_audit

            print(floor_audit.audit(args.dir, args.over))
            return 0
        if args.command == "merge":
            merged = merge(args.out, args.inputs)
            state = "complete" if merged.complete else "INCOMPLETE (a shard did not finish)"
            print(f"merged {merged.shards} shards, {merged.checks} checks, {state}: {merged.folder}")
            print(write_report(merged.folder, plots=not args.no_plots))
            return 0
        try:
            thresholds = thresholds_from_args(args)
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

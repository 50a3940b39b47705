"""Command line: ``python -m reports render DIR | matrix [ROOT] | gate BASE CANDIDATE``.

Bad input (a missing, empty, torn, corrupt or wrong-schema file) prints one line
naming the file, the line and the fix, and exits 2; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from reports.gate import EXIT_BAD_INPUT, Thresholds, gate, render_gate
from reports.matrix import MATRIX_DIR, write_matrix
from reports.records import ResultsFileError, write_text_atomic
from reports.render import write_report


def _fraction(text: str) -> float:
    """A threshold: '0.25' or '25%'."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (write 0.25 or 25%)") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
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
        help="relative growth of an error ratio that fails the gate (default %(default)s = +50%%)",
    )
    gate_cmd.add_argument(
        "--ratio-floor",
        type=_fraction,
        default=defaults.ratio_floor,
        help="ratios at or below this never count as drift: no worse than the plain "
        "same-dtype baseline (default %(default)s)",
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
        thresholds = Thresholds(
            args.ratio_drift,
            args.ratio_floor,
            args.max_slowdown,
            args.max_memory_growth,
            args.allow_incomplete,
        )
        result = gate(args.base, args.candidate, thresholds)
    except ResultsFileError as exc:
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

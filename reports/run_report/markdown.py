"""GitHub-flavoured Markdown building blocks that survive being pasted into a review."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

STATUS_ICON = {
    "pass": "✅",
    "fail": "❌",
    "known": "🐞",
    "flaky": "🎲",
    "unsupported": "➖",
    "unavailable": "🚫",
    "not run": "·",
}
LEGEND = (
    "✅ pass · ❌ fail (failed/total) · 🐞 known issue (failing, in the ledger) · 🎲 flaky (crashed once) · "
    "➖ unsupported (declared by the subject) · "
    "🚫 unavailable here · · not run"
)


def cell(text: object) -> str:
    """Text safe inside a table cell: one line, pipes escaped."""
    return re.sub(r"\s+", " ", str(text)).replace("|", "\\|").strip()


def code(text: object) -> str:
    """Inline code that survives backticks in the text."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    return f"{fence}{' ' if fence == '``' else ''}{text}{' ' if fence == '``' else ''}{fence}"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A pipe table; ``align`` is one of 'l', 'r', 'c' per column (default left)."""
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    aligns = [marks[a] for a in align.ljust(len(header), "l")]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "| " + " | ".join(aligns) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def details(summary: str, body: str) -> str:
    """A collapsed block; the blank lines let GitHub render Markdown inside it."""
    return f"<details><summary>{summary}</summary>\n\n{body.strip()}\n\n</details>"


def fenced(text: str, language: str = "") -> str:
    """A code block whose fence is longer than any backtick run inside the text."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def number(value: float | None, digits: int = 3) -> str:
    """Compact numbers for tables: 1.23, 4.5e-04, inf, n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e4):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


def truncate(text: str, limit: int = 160) -> str:
    """One line of at most ``limit`` characters, for a table cell."""
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def change(before: float, after: float) -> str:
    """How a ratio moved: '+12%' for small moves, '×3.5' / '÷2.4e+06' for large ones."""
    if before <= 0 or after <= 0 or not math.isfinite(before) or not math.isfinite(after):
        return ""
    factor = after / before
    if factor >= 2:
        return f"×{number(factor)}"
    if factor <= 0.5:
        return f"÷{number(1 / factor)}"
    return "±0%" if abs(factor - 1) < 0.005 else f"{factor - 1:+.0%}"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"

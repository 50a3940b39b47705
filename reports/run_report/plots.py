"""Plots where a reader would rather look than read: error ratio against sequence length.

PNG files written next to the report (atomically) with matplotlib's Agg backend
through the object API: no pyplot, no global figure state, no display needed.
The data preparation is pure and tested on its own; drawing only lays it out.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from reports.run_report.describe import worst_ratio
from reports.run_report.grid import DTYPES
from run_records.results_file import CaseResult, write_bytes_atomic

RUN_PLOT = "ratio-vs-length.png"
MATRIX_LENGTH_PLOT = "ratio-vs-length-by-version.png"
MATRIX_VERSION_PLOT = "ratio-vs-version.png"
DTYPE_COLORS = {"float32": "#1f77b4", "bfloat16": "#d62728", "float16": "#2ca02c", "float64": "#9467bd"}

Point = tuple[int, float, bool]  # (sequence length, error ratio, failed)
# Ratios far below 1 (a length-1 case is exact while its baseline is not) would squash
# the interesting range around 1 into a sliver; plots draw them at this floor instead.
RATIO_FLOOR = 1e-2
# A run plot is read at a glance: 3 x 3 panels. Past that, the subjects with failures and the
# highest ratios are drawn (matplotlib's layout also grows faster than the panel count: 67
# panels took a minute on 2 cores, more than the checks of some runs).
MAX_RUN_PANELS = 9


def sequence_length(result: CaseResult) -> int:
    """The x axis: the longer of the two sequences, where block and tail bugs live."""
    return max(result.case.q_len, result.case.kv_len)


def ratio_points(results: Iterable[CaseResult], floor: float = 0.0) -> dict[tuple[str, str], list[Point]]:
    """(subject, dtype) -> points, for results that measured a finite error ratio;
    ratios under ``floor`` are raised to it."""
    points: dict[tuple[str, str], list[Point]] = {}
    for result in results:
        ratio = worst_ratio(result)
        if ratio is None or ratio <= 0:
            continue
        key = (result.case.subject, result.case.dtype)
        points.setdefault(key, []).append(
            (sequence_length(result), max(ratio, floor), result.verdict in ("fail", "error"))
        )
    return {key: sorted(value) for key, value in sorted(points.items())}


def worst_per_length(points: Sequence[Point]) -> list[tuple[int, float]]:
    """The envelope a line is drawn through: the largest ratio at each length."""
    worst: dict[int, float] = {}
    for length, ratio, _ in points:
        worst[length] = max(ratio, worst.get(length, 0.0))
    return sorted(worst.items())


def panel_subjects(
    points: Mapping[tuple[str, str], Sequence[Point]], limit: int = MAX_RUN_PANELS
) -> list[str]:
    """The subjects a run plot draws, worst first: those with a failure, then by their highest
    ratio; at most ``limit``."""
    worst: dict[str, tuple[bool, float]] = {}
    for (subject, _), series in points.items():
        failed, ratio = worst.get(subject, (False, 0.0))
        worst[subject] = (failed or any(p[2] for p in series), max(ratio, *(p[1] for p in series)))
    return sorted(worst, key=lambda subject: (not worst[subject][0], -worst[subject][1], subject))[:limit]


def _dtype_order(dtype: str) -> tuple[int, str]:
    return (DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES), dtype)


def _figure(panels: int, columns: int, width: float = 4.6, height: float = 3.4):
    from matplotlib.figure import Figure  # lazy: the gate and the CLI's other commands need no matplotlib

    columns = max(1, min(columns, panels))
    rows = math.ceil(panels / columns)
    figure = Figure(figsize=(width * columns, height * rows + 0.6), dpi=110, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel().tolist()
    for extra in axes[panels:]:
        extra.set_visible(False)
    return figure, axes[:panels]


def _plain(value: float, _position: object = None) -> str:
    """Tick labels as plain numbers (0.5, 2, 1024), not powers: readers compare them with k."""
    return f"{value:g}"


def _style(ax, title: str, xlabel: str, *, log_lengths: bool = False) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel("error ratio (subject / same-dtype baseline)", fontsize=8)
    ax.set_yscale("log")
    low, high = ax.dataLim.intervaly  # call after drawing the data: narrow ranges need denser ticks
    decades = math.log10(high / low) if 0 < low < high else 0.0
    if 0 < low == high:  # a flat line (e.g. every ratio exactly 1): centre it in one decade
        ax.set_ylim(low / 3, high * 3)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    elif decades < 1:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 1.2, 1.5, 2, 3, 5, 7)))
    elif decades < 3:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    else:  # wide ranges (a near-exact tiny case next to ordinary ones): one tick per decade or fewer
        ax.yaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())
    if log_lengths:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    if 0 < low <= RATIO_FLOOR:
        ax.set_xlabel(f"{xlabel}\n(ratios below {RATIO_FLOOR:g} are drawn at {RATIO_FLOOR:g})", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle=":", label="as wrong as the baseline")
    ax.tick_params(labelsize=8)


def _save(figure, path: Path) -> Path:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    write_bytes_atomic(path, buffer.getvalue())
    return path


def plot_run(results: Iterable[CaseResult], path: Path, title: str = "") -> Path | None:
    """One panel per subject (the ``MAX_RUN_PANELS`` worst: ``panel_subjects``); one colour per
    dtype; red crosses mark failures. None if no data."""
    points = ratio_points(results, RATIO_FLOOR)
    subjects = panel_subjects(points)
    if not subjects:
        return None
    every = len({s for s, _ in points})
    if every > len(subjects):
        shown = f"the {len(subjects)} worst of {every} subjects"
        title = f"{title or 'Error ratio against sequence length'} · {shown}"
    figure, axes = _figure(len(subjects), 3)
    for ax, subject in zip(axes, subjects, strict=True):
        dtypes = sorted((d for s, d in points if s == subject), key=_dtype_order)
        failures_labelled = False  # one legend entry for all failures: the colour of the line says the dtype
        for dtype in dtypes:
            series = points[(subject, dtype)]
            color = DTYPE_COLORS.get(dtype, "0.3")
            ax.scatter([p[0] for p in series], [p[1] for p in series], s=10, alpha=0.35, color=color)
            envelope = worst_per_length(series)
            ax.plot(
                [e[0] for e in envelope],
                [e[1] for e in envelope],
                color=color,
                linewidth=1.4,
                marker="o",
                markersize=3,
                label=f"{dtype} (worst)",
            )
            failed = [p for p in series if p[2]]
            if failed:
                ax.scatter(
                    [p[0] for p in failed],
                    [p[1] for p in failed],
                    s=40,
                    marker="x",
                    color="#b00000",
                    zorder=5,
                    label=None if failures_labelled else "failed",
                )
                failures_labelled = True
        _style(ax, subject, "sequence length (max of q, kv)", log_lengths=True)
        ax.legend(fontsize=7, loc="best")
    figure.suptitle(title or "Error ratio against sequence length", fontsize=11)
    return _save(figure, path)


def plot_versions_by_length(runs: Mapping[str, Iterable[CaseResult]], path: Path) -> Path | None:
    """Matrix: one panel per (subject, dtype), one line per JAX version (worst ratio per length)."""
    per_version = {version: ratio_points(results, RATIO_FLOOR) for version, results in runs.items()}
    keys = sorted(
        {key for points in per_version.values() for key in points}, key=lambda k: (k[0], _dtype_order(k[1]))
    )
    if not keys:
        return None
    from matplotlib import colormaps

    colors = colormaps["viridis"]
    versions = list(runs)
    figure, axes = _figure(len(keys), 3)
    for ax, key in zip(axes, keys, strict=True):
        for position, version in enumerate(versions):
            series = per_version[version].get(key)
            if not series:
                continue
            envelope = worst_per_length(series)
            color = colors(position / max(1, len(versions) - 1) * 0.9)
            ax.plot(
                [e[0] for e in envelope],
                [e[1] for e in envelope],
                color=color,
                linewidth=1.3,
                marker="o",
                markersize=3,
                label=version,
            )
        _style(ax, f"{key[0]} · {key[1]}", "sequence length (max of q, kv)", log_lengths=True)
        ax.legend(fontsize=7, title="jax", title_fontsize=7, loc="best")
    figure.suptitle("Worst error ratio against sequence length, by JAX version", fontsize=11)
    return _save(figure, path)


def plot_versions(runs: Mapping[str, Iterable[CaseResult]], path: Path) -> Path | None:
    """Matrix: one panel per subject, one line per dtype: the worst ratio at each JAX version."""
    versions = list(runs)
    worst: dict[tuple[str, str], dict[str, float]] = {}
    for version, results in runs.items():
        for key, series in ratio_points(results, RATIO_FLOOR).items():
            worst.setdefault(key, {})[version] = max(p[1] for p in series)
    subjects = sorted({s for s, _ in worst})
    if not subjects:
        return None
    figure, axes = _figure(len(subjects), 2, width=5.2)
    for ax, subject in zip(axes, subjects, strict=True):
        for dtype in sorted((d for s, d in worst if s == subject), key=_dtype_order):
            values = worst[(subject, dtype)]
            xs = [i for i, v in enumerate(versions) if v in values]
            ax.plot(
                xs,
                [values[versions[i]] for i in xs],
                marker="o",
                markersize=4,
                linewidth=1.4,
                color=DTYPE_COLORS.get(dtype, "0.3"),
                label=dtype,
            )
        _style(ax, subject, "JAX version")
        ax.set_xticks(range(len(versions)), versions, rotation=30, ha="right")
        ax.legend(fontsize=7, loc="best")
    figure.suptitle("Worst error ratio per JAX version", fontsize=11)
    return _save(figure, path)

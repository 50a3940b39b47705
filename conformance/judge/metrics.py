"""Error of one tensor against the float64 reference: max-abs, mean-abs and the worst element.

Pure functions over NumPy arrays. Non-finite subject values where the reference is
finite count as an infinite error, so a NaN can never hide inside a mean or a max.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class ErrorStats:
    """max_abs, mean_abs over the compared elements; the worst element's index and values.

    ``count`` is the number of compared elements (0 when everything is excluded).
    """

    max_abs: float
    mean_abs: float
    worst_index: tuple[int, ...]
    worst_got: float
    worst_want: float
    count: int


def abs_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float64, ``inf`` where got is non-finite but want is finite, and 0
    where both are the same non-finite value (e.g. both -inf).

    got, want: any shape, broadcast-compatible; got in any float dtype (bfloat16 too).
    """
    got64 = np.asarray(got).astype(np.float64)
    want64 = np.asarray(want).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got64 - want64)
    same_nonfinite = ~np.isfinite(want64) & (got64 == want64)
    err = np.where(same_nonfinite, 0.0, err)
    return np.where(np.isnan(err), np.inf, err)


def error_stats(got: np.ndarray, want: np.ndarray, valid: np.ndarray | None = None) -> ErrorStats:
    """Stats of ``abs_error(got, want)`` over ``valid`` (bool, broadcastable; None = all)."""
    err = abs_error(got, want)
    keep = np.ones(err.shape, dtype=bool) if valid is None else np.broadcast_to(valid, err.shape)
    count = int(keep.sum())
    if count == 0:
        return ErrorStats(0.0, 0.0, (), 0.0, 0.0, 0)
    masked = np.where(keep, err, -1.0)
    flat = int(np.argmax(masked))
    index = tuple(int(i) for i in np.unravel_index(flat, err.shape))
    got64 = np.broadcast_to(np.asarray(got).astype(np.float64), err.shape)
    want64 = np.broadcast_to(np.asarray(want).astype(np.float64), err.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = float(err[keep].mean())
    return ErrorStats(
        max_abs=float(err[index]),
        mean_abs=mean,
        worst_index=index,
        worst_got=float(got64[index]),
        worst_want=float(want64[index]),
        count=count,
    )


def max_and_mean(got: np.ndarray, want: np.ndarray, valid: np.ndarray | None = None) -> tuple[float, float]:
    """(max, mean) of ``abs_error(got, want)`` over ``valid``; (0, 0) when nothing is compared.
    The two numbers of ``error_stats`` without locating the worst element: for answers that are
    only tried (``tolerance.trivial_passes``), several per judged tensor."""
    if valid is not None:
        keep = np.broadcast_to(valid, np.broadcast_shapes(np.shape(got), np.shape(want)))
        got, want = np.broadcast_to(got, keep.shape)[keep], np.broadcast_to(want, keep.shape)[keep]
    if np.size(want) == 0:
        return 0.0, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        if not np.isfinite(want).all():
            err = abs_error(got, want)
            return float(err.max()), float(err.mean())
        # A finite reference: a non-finite answer makes both NaN, which is abs_error's inf here, at
        # a third of its cost (no up-casts, no masks for matching infinities).
        err = np.abs(np.asarray(got, dtype=np.float64) - want)
        worst, mean = float(err.max()), float(err.mean())
    return (math.inf, math.inf) if math.isnan(worst) else (worst, mean)


def fraction_above(
    got: np.ndarray, want: np.ndarray, threshold: float, valid: np.ndarray | None = None
) -> float:
    """Fraction of the compared elements whose abs error exceeds ``threshold``."""
    err = abs_error(got, want)
    keep = np.ones(err.shape, dtype=bool) if valid is None else np.broadcast_to(valid, err.shape)
    count = int(keep.sum())
    return 0.0 if count == 0 else float((err[keep] > threshold).sum() / count)


def magnitude(want: np.ndarray, valid: np.ndarray | None = None) -> tuple[float, float]:
    """(max, mean) of |want| over the finite compared elements: the scale of the floor."""
    want64 = np.asarray(want, dtype=np.float64)
    keep = np.isfinite(want64)
    if valid is not None:
        keep &= np.broadcast_to(valid, want64.shape)
    if not keep.any():
        return 0.0, 0.0
    values = np.abs(want64[keep])
    return float(values.max()), float(values.mean())


def ratio(subject: float, baseline: float) -> float:
    """subject / baseline; 0 when both are 0, inf when only the baseline is exact."""
    if baseline > 0:
        return subject / baseline
    return 0.0 if subject == 0 else float("inf")

"""The tolerance policy: a subject may be at most k times as wrong as plain attention.

For every tensor (out, lse, dq, dk, dv, dbias, dsinks), with errors measured against the
float64 reference on the same quantised inputs:

    max_abs(subject)  <= k      * max_abs(baseline)  + floor_max
    mean_abs(subject) <= k_mean * mean_abs(baseline) + floor_mean

``baseline`` is ``conformance.judge.baseline``: the attention a user would write in the
subject's dtype. ``floor_max`` is ``FLOOR_ULPS`` x eps of the dtype at max |ref| (one ulp in
fp8, whose every intermediate is float32, so a careful kernel is one rounding of a float32
value away; where ref is zero by cancellation, ulps of the intermediates' dtype at the
cancelling terms: ``floors``). ``floor_mean`` is ``MEAN_FLOOR_ULPS`` x eps at mean |ref|
(where the baseline is exact, a correct kernel that rounds once more, e.g. a softcapped max
recomputed inside a fused exp, is off by up to an ulp on every element: Sk=1 and softcapped
logits, seen on an int8 decode control; half an ulp failed it), but never less than
``floor_max / sqrt(n)`` over n compared elements: a mean of a few elements is a noisy sample,
and over one element the mean *is* the max. The floors only matter when the baseline happens
to be (nearly) exact, e.g. in float64 or tiny tensors. Max-abs alone misses systematic drift,
mean-abs alone misses single outliers; both must hold.
docs/tolerances.md ("Tolerance policy") explains each k.

A judgement must be able to fail: where an all-zero answer, the reference negated, or the
reference with its rows (or heads) shifted by one would meet the same two rules, the tensor
is *weak* there (``trivial_passes``). A weak tensor that meets its tolerance is not a pass:
the check says it was not judged, and a check with nothing else judged is ``unsupported``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from conformance.judge import dtypes, metrics
from run_records.results_file import TensorMetrics

FLOOR_ULPS = 2.0
FP8_FLOOR_ULPS = 1.0  # fp8 keeps every intermediate in float32: only the final rounding is left
MEAN_FLOOR_ULPS = 1.0
# One ulp of the exponent of a recomputed p (the saved lse's rounding, and its conversion to base 2
# where the kernel exponentiates in base 2), in the dtype a kernel saves lse in: see ``floors``.
RECOMPUTED_P_ULPS = 1.0


@dataclasses.dataclass(frozen=True)
class TensorTolerance:
    """k for the max-abs rule, k_mean for the mean-abs rule, and why."""

    tensor: str
    k: float
    k_mean: float
    why: str


TOLERANCES: dict[str, TensorTolerance] = {
    t.tensor: t
    for t in (
        TensorTolerance(
            "out",
            3.0,
            3.0,
            "A blocked online softmax rounds each rescaling and each partial sum once more "
            "than one-pass attention; 3x absorbs that (float32 ratios seen up to 1.4), while a "
            "wrong mask, scale or tail is orders of magnitude off. The mean gets the same 3x: "
            "with few rows (decode, Sq = 1) errors within a row move together, so the mean is "
            "a small sample (2.3 seen); drift still stands out, being judged against the "
            "baseline's mean error, which is far below its max.",
        ),
        TensorTolerance(
            "lse",
            3.0,
            3.0,
            "lse = m + log(l) accumulates the same rescaled partial sums as out.",
        ),
        TensorTolerance(
            "dq",
            5.0,
            4.0,
            "A flash backward recomputes p from the saved lse and chains three matmuls and "
            "a cancellation (ds = p (dp - delta), delta from the rounded out), each blocked, "
            "so each adds roundings the one-pass baseline lacks; float32 ratios reach ~2.5 at "
            "ci sizes and grow slowly with the number of blocks. A wrong gradient is off by "
            "orders of magnitude.",
        ),
        TensorTolerance(
            "dk",
            5.0,
            4.0,
            "dk sums ds^T q over every query block (and the GQA group): one more blocked "
            "reduction than dq; float32 ratios reach ~2.8 at ci sizes.",
        ),
        TensorTolerance("dv", 5.0, 4.0, "dv sums p^T do over query blocks, as dk does (~2.3 seen)."),
        TensorTolerance(
            "dbias",
            5.0,
            4.0,
            "dbias is ds itself, summed over the bias's broadcast axes: dq's error before its matmul.",
        ),
        TensorTolerance(
            "dsinks",
            6.0,
            4.0,
            "dsinks = -sum over rows of p_sink (dout . out): out's and lse's errors summed over "
            "every query row of a head and the batch. One element per head, each a long sum whose "
            "rounding errors partly cancel, so the ratio of two such sums spreads wider than for "
            "a large tensor: splash float32 ratios 0.3 to 4.4 (mean 0.4 to 2.9) over 17 cases. "
            "A wrong dsinks (sign, missing exp, a row dropped) is off by O(1).",
        ),
    )
}


def floors(
    dtype: str,
    want: np.ndarray,
    valid: np.ndarray | None,
    cancellation: float = 0.0,
    recomputed_p: float = 0.0,
) -> tuple[float, float]:
    """(floor_max, floor_mean): the rounding a careful kernel cannot avoid, where the baseline
    happens to be exact.

    floor_max: ulps of ``dtype`` at max|want| (``FLOOR_ULPS``; ``FP8_FLOOR_ULPS`` in fp8,
    whose only rounding left is the final one); floor_mean: ``MEAN_FLOOR_ULPS`` ulps at
    mean|want|, or floor_max / sqrt(n) when that is larger (n: the number of compared elements).

    ``cancellation``: the magnitude of terms that cancel to give ``want`` (see
    ``baseline.BaselineGrads.cancellation``). When ``want`` is numerically zero next to it
    (e.g. dq and dk when every row sees a single key: ds = p (dp - delta) = 0 exactly), the
    floors are taken at that magnitude instead, in ulps of the dtype the intermediates live
    in (``dtypes.logits_dtype``: the dtype itself, float32 for fp8). A bf16 kernel may store
    delta in bf16 and leave ulps of bf16 behind; an fp8 kernel sums in float32, so ulps of e5m2
    there would be 2^19 times too loose (they let a dsinks of the wrong sign pass).

    ``recomputed_p``: the magnitude through which one ulp of p's exponent reaches ``want`` (see
    ``baseline.BaselineGrads.recomputed_p``). A flash backward recomputes p = exp(s - lse) from the
    lse its forward saved in float32 (float64 for float64), so p is off by up to eps * |lse|
    relative, an error the one-pass baseline never makes. ``RECOMPUTED_P_ULPS`` ulps of that dtype
    at this magnitude are added to floor_max (and so to floor_mean's floor_max / sqrt(n)).
    """
    top, mean = metrics.magnitude(want, valid)
    count = int(np.broadcast_to(True if valid is None else valid, np.shape(want)).sum())
    intermediate = dtypes.eps(dtypes.logits_dtype(dtype))
    if top <= intermediate * cancellation:
        eps, ulps, top, mean = intermediate, FLOOR_ULPS, cancellation, cancellation
    else:
        eps, ulps = dtypes.eps(dtype), FP8_FLOOR_ULPS if dtypes.is_fp8(dtype) else FLOOR_ULPS
    saved_lse = dtypes.eps("float64" if dtype == "float64" else "float32")
    floor_max = ulps * eps * top + RECOMPUTED_P_ULPS * saved_lse * recomputed_p
    return floor_max, max(MEAN_FLOOR_ULPS * eps * mean, floor_max / math.sqrt(max(count, 1)))


def _row_axis(tensor: str) -> int:
    """The axis whose neighbours a row-shift swaps: queries for lse, heads for dsinks [Hq],
    sequence positions for everything [..., S, D] (out, dq, dk, dv) and dbias [.., Sq, Sk]."""
    return {"lse": -1, "dsinks": 0}.get(tensor, -2)


def trivial_answers(tensor: str, want: np.ndarray) -> dict[str, np.ndarray]:
    """The wrong answers a judgement must be able to reject, by name.

    A shift needs two distinct positions on its axis: a single row has no neighbour to
    swap with. Heads are axis 1 of every tensor with a head axis (out, lse, dq, dk, dv).
    """
    ref = np.asarray(want, dtype=np.float64)
    answers = {"zeros": np.zeros_like(ref), "negated": -ref}
    rows = _row_axis(tensor)
    if -ref.ndim <= rows < ref.ndim and ref.shape[rows] > 1:
        answers["rows shifted"] = np.roll(ref, 1, axis=rows)
    if ref.ndim >= 3 and tensor != "dbias" and ref.shape[1] > 1:
        answers["heads shifted"] = np.roll(ref, 1, axis=1)
    return answers


def trivial_passes(
    tensor: str, want: np.ndarray, valid: np.ndarray | None, tol_max: float, tol_mean: float
) -> tuple[str, ...]:
    """The trivial answers that meet both rules: a judgement they meet cannot fail."""
    keep = np.broadcast_to(True if valid is None else valid, np.shape(want))
    if not keep.any():
        return ()  # nothing compared: nothing passed, trivially or not
    compared = np.asarray(want, dtype=np.float64)[keep]  # selected once, not per answer
    met = []
    for name, answer in trivial_answers(tensor, want).items():
        worst, mean = metrics.max_and_mean(answer[keep], compared)
        if worst <= tol_max and mean <= tol_mean:
            met.append(name)
    return tuple(met)


@dataclasses.dataclass(frozen=True)
class Judgement:
    """A judged tensor: the record's metrics plus the mean-abs bound (which the record
    format does not carry) for the failure message."""

    metrics: TensorMetrics
    mean_tolerance: float
    reference_max: float = 0.0  # max |reference| over the compared elements

    @property
    def passed(self) -> bool:
        return self.metrics.passed

    def labelled(self, label: str) -> Judgement:
        """The same judgement of a transformed call's tensor, named ``tensor (label)`` in the record
        (``out (slice 0)``, ``dq (sharded: batch 2, sequence 2)``)."""
        tensor = f"{self.metrics.tensor} ({label})"
        return dataclasses.replace(self, metrics=dataclasses.replace(self.metrics, tensor=tensor))

    @property
    def weak(self) -> tuple[str, ...]:
        """The trivial answers that would have passed too (empty: the judgement can fail)."""
        return self.metrics.weak

    def explain_weak(self) -> str:
        """One line: why this tensor's pass is no pass."""
        m = self.metrics
        return (
            f"{m.tensor}: not judged, its tolerance cannot fail: {' and '.join(m.weak)} would pass too "
            f"(max-abs tolerance {m.tolerance:.3g} = {m.k:g} x baseline {m.baseline_max_abs:.3g} + floor "
            f"{m.floor:.3g}; max |reference| {self.reference_max:.3g})"
        )

    def explain(self) -> str:
        """One line: whether each rule held, by how much, and where the worst element is."""
        m = self.metrics
        verdict = "ok" if m.passed else "OUT OF TOLERANCE"
        return (
            f"{m.tensor}: {verdict}; max-abs {m.max_abs:.3g} vs tolerance {m.tolerance:.3g} "
            f"(= {m.k:g} x baseline {m.baseline_max_abs:.3g} + floor {m.floor:.3g}), ratio {m.ratio:.3g}; "
            f"mean-abs {m.mean_abs:.3g} vs tolerance {self.mean_tolerance:.3g} "
            f"(baseline {m.baseline_mean_abs:.3g}, ratio {m.mean_ratio:.3g}); "
            f"worst at {list(m.worst_index)}: subject {m.worst_subject:.6g}, "
            f"reference {m.worst_reference:.6g}; "
            f"{100 * m.fraction_out_of_tolerance:.3g}% of elements over the max-abs tolerance"
        )


def judge(
    tensor: str,
    got: np.ndarray,
    want: np.ndarray,
    baseline: np.ndarray,
    dtype: str,
    valid: np.ndarray | None = None,
    cancellation: float = 0.0,
    recomputed_p: float = 0.0,
) -> Judgement:
    """Compare ``got`` (subject) and ``baseline`` to ``want`` (float64 reference) over ``valid``.

    All three share one shape (e.g. out: [B, Hq, Sq, Dv]); ``valid`` is a bool array
    broadcastable to it (fully masked rows excluded), or None for every element.
    ``cancellation``, ``recomputed_p``: see ``floors``.
    """
    if np.shape(got) != np.shape(want):
        raise ValueError(f"{tensor}: subject shape {np.shape(got)} != reference shape {np.shape(want)}")
    rule = TOLERANCES[tensor]
    sub = metrics.error_stats(got, want, valid)
    base = metrics.error_stats(baseline, want, valid)
    floor_max, floor_mean = floors(dtype, want, valid, cancellation, recomputed_p)
    tol_max = rule.k * base.max_abs + floor_max
    tol_mean = rule.k_mean * base.mean_abs + floor_mean
    passed = sub.max_abs <= tol_max and sub.mean_abs <= tol_mean
    weak = trivial_passes(tensor, want, valid, tol_max, tol_mean)
    record = TensorMetrics(
        tensor=tensor,
        max_abs=sub.max_abs,
        mean_abs=sub.mean_abs,
        baseline_max_abs=base.max_abs,
        baseline_mean_abs=base.mean_abs,
        ratio=metrics.ratio(sub.max_abs, base.max_abs),
        mean_ratio=metrics.ratio(sub.mean_abs, base.mean_abs),
        k=rule.k,
        floor=floor_max,
        tolerance=tol_max,
        worst_index=sub.worst_index,
        worst_subject=sub.worst_got,
        worst_reference=sub.worst_want,
        fraction_out_of_tolerance=metrics.fraction_above(got, want, tol_max, valid),
        passed=bool(passed),
        k_mean=rule.k_mean,
        floor_mean=floor_mean,
        mean_tolerance=tol_mean,
        weak=weak,
    )
    return Judgement(record, tol_mean, metrics.magnitude(want, valid)[0])

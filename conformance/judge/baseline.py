"""The baseline of the tolerance policy: plain one-pass attention at the subject's precision.

This is the attention a user would write (``einsum`` logits, scale, bias, softcap,
``where`` masking with the dtype's most negative value, softmax with the sink as one more
column, ``einsum`` with v),
computed the way XLA computes it for that dtype: every elementwise intermediate and every
matmul operand rounded to the dtype, matmuls and reductions accumulating in float32 (float64
for float64). A reduction's terms are never rounded, only its result (the softmax sum, delta,
dsinks, dbias, the GQA group sums of dk and dv): the API promises storage in the dtype, not
arithmetic in it, so a kernel that sums rounded terms has a precision defect to report, and
the baseline must not copy it. In the fp8
dtypes it is what an fp8 kernel computes: the fp8 inputs go into matmuls that accumulate in
float32, logits and softmax stay float32 (no kernel exponentiates in 8 bits), P is rounded
to V's fp8 dtype before the matmuls it feeds only where the subject declares so
(``Capabilities.internal_quantization``), and out is rounded once at the end, to the dtype
the subject declares for it (``Capabilities.output_dtypes``), lse staying float32. Its
error against the float64 reference is the yardstick. Where the subject's API takes no scale
(``Capabilities.q_prescaled``), the baseline, like every caller of that API, multiplies q by
the scale and rounds the product to q's dtype before the logits. Its
error against the float64 reference is the yardstick: a subject may be at most k
times as wrong (``tolerance.py``). Gradients are the same formulas' backward pass
(as autodiff of that code computes them), rounded the same way.

It is written in NumPy, not JAX, on purpose: no per-shape compilation (which would
cost more than the subject's own call on CPU), and the yardstick does not move when
the installed JAX version changes, so error ratios compare across versions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from conformance.judge import dtypes
from kernels.contract.base import Capabilities
from reference.masks import full_visibility, has_mask
from reference.spec import AttentionInputs, AttentionSpec, Dropout


@dataclasses.dataclass(frozen=True, eq=False)
class BaselineOutput:
    """out: [B, Hq, Sq, Dv] and lse: [B, Hq, Sq], in the inputs' dtype (mean(v) on fully masked rows).

    lse_wide: the lse of a kernel that keeps l, the softmax sum, in float32 and stores lse there,
    ``m + log(l)`` in float32 with l unrounded: no storage rounding of lse to make. The lse check
    judges a subject that returns float32 (or wider) against it, a narrower one against ``lse``:
    the storage the subject shows (observed, never declared)."""

    out: np.ndarray
    lse: np.ndarray
    lse_wide: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class BaselineGrads:
    """dq, dk, dv in the inputs' shapes and dtype; dbias in the bias's shape, or None; dsinks
    [Hq], or None.

    cancellation: per tensor (dq, dk, dbias), the largest magnitude of the terms that
    ``ds = p * (dp - delta)`` cancels, carried through to that tensor: scale * |delta| * |k|
    for dq, scale * max_j sum_i p_ij |delta_i| * |q| for dk, sum of p |delta| over the bias's
    broadcast axes for dbias, max_h sum_i p_sink |delta_i| for dsinks. The tolerance's floor
    uses it where the reference is zero.
    """

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dbias: np.ndarray | None
    dsinks: np.ndarray | None = None
    cancellation: dict[str, float] = dataclasses.field(default_factory=dict)
    recomputed_p: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Numerics:
    """What a subject declares about its own arithmetic, which the baseline follows.

    quantize_p: in fp8 cases, P is rounded to V's dtype before the matmuls it feeds
    (``Capabilities.internal_quantization == "p_fp8"``); out_dtype: the dtype out comes back
    in (``Capabilities.output_dtype``), None for the inputs' own; prescale_q: q arrives as
    ``q * scale`` rounded to its dtype (``Capabilities.q_prescaled``: an API without a scale).
    """

    quantize_p: bool = False
    out_dtype: str | None = None
    prescale_q: bool = False


def numerics(caps: Capabilities, dtype: str) -> Numerics:
    """The baseline's ``Numerics`` for a subject's cases in ``dtype``."""
    out = caps.output_dtype(dtype)
    return Numerics(
        quantize_p=caps.internal_quantization == "p_fp8",
        out_dtype=None if out == dtype else out,
        prescale_q=caps.q_prescaled,
    )


@dataclasses.dataclass(frozen=True)
class _Precision:
    """work: the accumulation dtype; rnd: rounds a work-dtype array to the subject's dtype (each
    intermediate); p_rnd: rounds P before the matmuls it feeds; out, lse: the dtypes those end in;
    q_rnd: rounds ``q * scale`` to q's dtype, or None where the scale multiplies the logits."""

    dtype: np.dtype
    work: np.dtype
    rnd: Callable[[np.ndarray], np.ndarray]
    p_rnd: Callable[[np.ndarray], np.ndarray]
    out: np.dtype
    lse: np.dtype
    q_rnd: Callable[[np.ndarray], np.ndarray] | None = None


def _precision(dtype: np.dtype, model: Numerics = Numerics()) -> _Precision:
    name = dtypes.name_of(dtype)
    out = np.dtype(dtype) if model.out_dtype is None else dtypes.numpy_dtype(model.out_dtype)
    same = lambda x: x  # noqa: E731
    if name in ("float32", "float64"):
        work = np.dtype(name)
        q_rnd = same if model.prescale_q else None  # q * scale is computed in the dtype: rounded
        return _Precision(work, work, same, same, out, work, q_rnd)
    work = np.dtype(np.float32)
    to_dtype = lambda x: np.asarray(x).astype(dtype).astype(work)  # noqa: E731
    q_rnd = to_dtype if model.prescale_q else None
    if dtypes.is_fp8(name):
        # Intermediates stay float32; P is rounded to V's dtype only where the subject says so.
        p_rnd = to_dtype if model.quantize_p else same
        return _Precision(np.dtype(dtype), work, same, p_rnd, out, work, q_rnd)
    return _Precision(np.dtype(dtype), work, to_dtype, same, out, np.dtype(dtype), q_rnd=q_rnd)


@dataclasses.dataclass(frozen=True, eq=False)
class _Forward:
    """Intermediates the backward pass reuses. All [B, Hq, Sq, Sk] unless noted."""

    p: np.ndarray
    p_kept: np.ndarray  # p times the dropout weights (rounded), what meets v; p itself without dropout
    weights: np.ndarray | None  # the dropout weights keep / (1 - rate) in the work dtype, or None
    p_sink: np.ndarray | None  # [B, Hq, Sq, 1]: the sink's share of each row, or None
    tanh: np.ndarray | None
    out: np.ndarray  # [B, Hq, Sq, Dv]
    lse: np.ndarray  # [B, Hq, Sq]
    lse_wide: np.ndarray  # [B, Hq, Sq]: m + log(l) in the work dtype, l unrounded
    k: np.ndarray  # repeated to Hq heads
    v: np.ndarray
    scale: float
    q: np.ndarray  # the q the logits were computed from: q * scale rounded to q's dtype where pre-scaled


def _visible(inputs: AttentionInputs, spec: AttentionSpec) -> np.ndarray | None:
    """[B, Hq|1, Sq, Sk] visibility; a -inf bias counts as masked (and becomes 0 in the bias)."""
    vis = full_visibility(spec, inputs) if has_mask(spec, inputs) else None
    if inputs.bias is not None:
        neg = np.isneginf(np.asarray(inputs.bias, dtype=np.float64))
        if neg.any():
            vis = ~neg if vis is None else vis & ~neg
    return vis


def _forward(
    inputs: AttentionInputs, spec: AttentionSpec, pr: _Precision, dropout: Dropout | None = None
) -> _Forward:
    r, w = pr.rnd, pr.work
    group = inputs.q.shape[1] // inputs.k.shape[1]
    q = inputs.q.astype(w)
    k = np.repeat(inputs.k.astype(w), group, axis=1)
    v = np.repeat(inputs.v.astype(w), group, axis=1)
    scale = spec.resolved_scale(q.shape[-1])
    if pr.q_rnd is not None:  # the API takes no scale: its caller rounds q * scale to q's dtype
        q = pr.q_rnd(q * w.type(scale))
        s = r(q @ k.swapaxes(-1, -2))
    else:
        s = r(r(q @ k.swapaxes(-1, -2)) * w.type(scale))
    if inputs.bias is not None:
        bias = np.asarray(inputs.bias, dtype=np.float64)
        s = r(s + np.where(np.isneginf(bias), 0.0, bias).astype(w))
    tanh = None
    if spec.softcap is not None:
        cap = w.type(spec.softcap)
        tanh = r(np.tanh(r(s / cap)))
        s = r(cap * tanh)
    vis = _visible(inputs, spec)
    if vis is not None:
        mask_value = dtypes.max_value(dtypes.logits_dtype(dtypes.name_of(pr.dtype))) * -1
        s = np.where(vis, s, w.type(mask_value))
    # The sink is one more column of the logits, in every row, that attends to no value.
    sink = None if inputs.sinks is None else inputs.sinks.astype(w)[None, :, None, None]
    m = s.max(axis=-1, keepdims=True)
    if sink is not None:
        m = np.maximum(m, sink)
    p_sink = None
    with np.errstate(over="ignore", invalid="ignore"):
        # The denominator sums the exponentials as computed, in the work dtype: a sum's terms
        # are never rounded to the storage dtype (a kernel that does so has a defect to report).
        e = np.exp(r(s - m))
        denom = e.sum(axis=-1, keepdims=True)
        if sink is not None:
            e_sink = np.exp(r(sink - m))
            denom = denom + e_sink
            p_sink = r(e_sink / denom)
        summed = denom
        denom = r(denom)
        p = r(e / denom)
        lse = r(m + r(np.log(denom)))[..., 0]
        lse_wide = (m + np.log(summed))[..., 0]
    # Dropout multiplies the normalised weights, as a user's ``p * keep / (1 - rate)`` in the dtype.
    weights = None if dropout is None else r(dropout.weights().astype(w))
    p_kept = p if weights is None else r(p * weights)
    out = r(pr.p_rnd(p_kept) @ v)
    return _Forward(
        p=p,
        p_kept=p_kept,
        weights=weights,
        p_sink=p_sink,
        tanh=tanh,
        out=out,
        lse=lse,
        lse_wide=lse_wide,
        k=k,
        v=v,
        scale=scale,
        q=q,
    )


def _sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum x over the axes where ``shape`` has size 1 (the bias's broadcast axes)."""
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def _group_sum(x: np.ndarray, kv_heads: int) -> np.ndarray:
    """[B, Hq, S, D] -> [B, Hkv, S, D]: query head h feeds kv head h // G."""
    b, hq, s, d = x.shape
    return x.reshape(b, kv_heads, hq // kv_heads, s, d).sum(axis=2)


def forward(
    inputs: AttentionInputs,
    spec: AttentionSpec,
    model: Numerics = Numerics(),
    dropout: Dropout | None = None,
) -> BaselineOutput:
    """The baseline's out and lse: out in the inputs' dtype (``model.out_dtype`` where set), lse
    in the inputs' dtype (float32 for fp8 inputs), and ``lse_wide`` in float32 (float64 for
    float64). ``dropout``: applied to the normalised weights."""
    pr = _precision(inputs.q.dtype, model)
    fwd = _forward(inputs, spec, pr, dropout)
    wide = np.float64 if pr.work == np.float64 else np.float32
    return BaselineOutput(
        out=fwd.out.astype(pr.out), lse=fwd.lse.astype(pr.lse), lse_wide=fwd.lse_wide.astype(wide)
    )


def gradients(
    inputs: AttentionInputs,
    spec: AttentionSpec,
    dout: np.ndarray,
    model: Numerics = Numerics(),
    dropout: Dropout | None = None,
) -> BaselineGrads:
    """The baseline's gradients of ``sum(out * dout)``; dout: [B, Hq, Sq, Dv] in the inputs' dtype.
    ``dropout``: the forward's weights, applied to d(weights) as autodiff of that code does."""
    pr = _precision(inputs.q.dtype, model)
    r, w = pr.rnd, pr.work
    fwd = _forward(inputs, spec, pr, dropout)
    do = np.asarray(dout).astype(w)
    kv_heads = inputs.k.shape[1]
    # Every reduction below (delta, dsinks, dbias, the GQA group sums of dk and dv) sums its
    # terms as computed, in the work dtype, and rounds only its result: the contract is storage
    # in the dtype, not arithmetic in it. Matmul operands (p, ds) are stored, so rounded.
    dv = r(_group_sum(pr.p_rnd(fwd.p_kept).swapaxes(-1, -2) @ do, kv_heads))
    dp = r(do @ fwd.v.swapaxes(-1, -2))
    if fwd.weights is not None:
        dp = r(dp * fwd.weights)
    delta = r((do * fwd.out).sum(axis=-1, keepdims=True))
    dsinks = None
    if fwd.p_sink is not None:
        dsinks = r(-(fwd.p_sink * delta).sum(axis=(0, 2, 3))).astype(pr.dtype)
    ds_terms = fwd.p * r(dp - delta)  # d loss / d (capped, biased, scaled logits)
    if fwd.tanh is not None:
        ds_terms = ds_terms * r(1 - r(fwd.tanh * fwd.tanh))
    ds = r(ds_terms)
    dbias = None
    if inputs.bias is not None:
        dbias = r(_sum_to(ds_terms, inputs.bias.shape)).astype(pr.dtype)
    scale = w.type(fwd.scale)
    dq = r(r(ds @ fwd.k) * scale)
    # Where q arrived as q * scale, that product carries dk's scale already.
    # Each query head's share is a term of the group sum: scaled, never rounded, before it.
    dk_heads = ds.swapaxes(-1, -2) @ fwd.q if pr.q_rnd is not None else (ds.swapaxes(-1, -2) @ fwd.q) * scale
    dk = r(_group_sum(dk_heads, kv_heads))
    q = inputs.q.astype(w)
    return BaselineGrads(
        dq=dq.astype(pr.dtype),
        dk=dk.astype(pr.dtype),
        dv=dv.astype(pr.dtype),
        dbias=dbias,
        dsinks=dsinks,
        cancellation=_cancellation(fwd, delta, q, inputs.bias),
        recomputed_p=_recomputed_p(fwd, do, delta, inputs.sinks, kv_heads),
    )


def _cancellation(
    fwd: _Forward, delta: np.ndarray, q: np.ndarray, bias: np.ndarray | None
) -> dict[str, float]:
    """Magnitudes of the cancelling terms of ds, carried to dq, dk and dbias (see BaselineGrads)."""
    with np.errstate(invalid="ignore", over="ignore"):
        weight = np.abs(np.nan_to_num(delta.astype(np.float64)))  # [B, Hq, Sq, 1]
        p = np.nan_to_num(fwd.p.astype(np.float64))
        per_key = (p * weight).sum(axis=2)  # [B, Hq, Sk]: sum_i p_ij |delta_i|
        out = {
            "dq": fwd.scale * float(weight.max(initial=0.0)) * float(np.abs(fwd.k).max(initial=0.0)),
            "dk": fwd.scale * float(per_key.max(initial=0.0)) * float(np.abs(q).max(initial=0.0)),
        }
        if bias is not None:
            out["dbias"] = float(_sum_to(p * weight, bias.shape).max(initial=0.0))
        if fwd.p_sink is not None:
            per_head = (np.nan_to_num(fwd.p_sink.astype(np.float64)) * weight).sum(axis=(0, 2, 3))
            out["dsinks"] = float(per_head.max(initial=0.0))
    return out


def _recomputed_p(
    fwd: _Forward, do: np.ndarray, delta: np.ndarray, sinks: np.ndarray | None, kv_heads: int
) -> dict[str, float]:
    """What one float32 ulp of p's exponent carries to dv and dsinks (see BaselineGrads).

    Each row's lse is rounded on its own, so the rows' shares add like independent errors
    (root of the sum of squares); the sink's own rounding, where a kernel rescales it, is shared
    by every row of its head, so it adds linearly: |sink| |dsinks|."""
    with np.errstate(invalid="ignore", over="ignore"):
        # Fully masked rows have a mask-value lse but a zero dout and delta: no share.
        lse = np.abs(np.nan_to_num(fwd.lse.astype(np.float64)))[..., None]  # [B, Hq, Sq, 1]
        p = np.nan_to_num(fwd.p_kept.astype(np.float64))  # what dv's matmul takes: dropout applied
        # Each row's largest |do| stands for all its columns: a bound over d at a 64th of a matmul's cost.
        row = np.square(lse * np.abs(do.astype(np.float64)).max(axis=-1, keepdims=True))  # [B, Hq, Sq, 1]
        squares = np.nan_to_num((p * p * row).sum(axis=-2))[..., None]  # [B, Hq, Sk, 1]
        out = {"dv": float(np.sqrt(_group_sum(squares, kv_heads)).max(initial=0.0))}
        if fwd.p_sink is not None and sinks is not None:
            terms = np.nan_to_num(fwd.p_sink.astype(np.float64) * delta.astype(np.float64))
            rows = np.sqrt(np.square(np.nan_to_num(terms * lse)).sum(axis=(0, 2, 3)))
            shared = np.abs(np.asarray(sinks, dtype=np.float64)) * np.abs(terms.sum(axis=(0, 2, 3)))
            out["dsinks"] = float((rows + shared).max(initial=0.0))
    return out

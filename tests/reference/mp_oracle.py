"""Attention in mpmath at 40 significant digits, written from docs/semantics.md alone.

Shares no code with ``reference/attention.py``: loops over every (b, h, i) row, the
logits in the documented order (scale, bias, softcap, mask), the sink (one more
logit per query head, in the denominator only), the softmax in arbitrary precision,
and the backward pass from the textbook softmax Jacobian written element by element.
The visibility comes from ``prose_masks``.
"""

from __future__ import annotations

import dataclasses
import itertools

import mpmath
import numpy as np

from reference.spec import AttentionInputs, AttentionSpec
from tests.reference.prose_masks import visibility

DIGITS = 40


@dataclasses.dataclass(frozen=True, eq=False)
class MpResult:
    """Object arrays of mpf. out: [B, Hq, Sq, Dv]; lse: [B, Hq, Sq]; fully_masked: bool [B, Hq, Sq].
    Gradients (of sum(out * dout)) are None when no dout was given; dbias has the bias's shape."""

    out: np.ndarray
    lse: np.ndarray
    fully_masked: np.ndarray
    dq: np.ndarray | None = None
    dk: np.ndarray | None = None
    dv: np.ndarray | None = None
    dbias: np.ndarray | None = None
    dsinks: np.ndarray | None = None


def to_mp(x: np.ndarray) -> np.ndarray:
    """float64 (exactly) or already-mpf array -> object array of mpf."""
    x = np.asarray(x)
    if x.dtype == object:
        return x
    flat = [mpmath.mpf(float(v)) for v in x.astype(np.float64).ravel()]
    return np.array(flat + [None], dtype=object)[:-1].reshape(x.shape)


def _zeros(shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = mpmath.mpf(0)
    return out


def attention(
    spec: AttentionSpec,
    inputs: AttentionInputs,
    dout: np.ndarray | None = None,
    values: dict[str, np.ndarray] | None = None,
) -> MpResult:
    """Forward (and, given ``dout``, backward) in mpmath.

    ``values`` may replace q, k, v, bias or sinks with mpf object arrays of the same shape
    (for numerical differentiation); the visibility always comes from ``inputs``.
    """
    with mpmath.workdps(DIGITS):
        return _attention(spec, inputs, dout, values or {})


def _attention(
    spec: AttentionSpec, inputs: AttentionInputs, dout: np.ndarray | None, values: dict[str, np.ndarray]
) -> MpResult:
    q = to_mp(values.get("q", inputs.q))
    k = to_mp(values.get("k", inputs.k))
    v = to_mp(values.get("v", inputs.v))
    n_b, n_hq, n_sq, n_d = q.shape
    n_hkv, n_sk, n_dv = v.shape[1:]
    group = n_hq // n_hkv
    full = (n_b, n_hq, n_sq, n_sk)
    bias = None
    if inputs.bias is not None:
        bias = to_mp(values.get("bias", inputs.bias))
    scale = 1 / mpmath.sqrt(n_d) if spec.scale is None else mpmath.mpf(float(spec.scale))
    sinks = None if inputs.sinks is None else to_mp(values.get("sinks", inputs.sinks))
    cap = None if spec.softcap is None else mpmath.mpf(float(spec.softcap))
    vis = visibility(spec, inputs)
    d_out = None if dout is None else to_mp(dout)

    out = _zeros((n_b, n_hq, n_sq, n_dv))
    lse = np.full((n_b, n_hq, n_sq), mpmath.mpf("-inf"), dtype=object)
    dq, dk, dv = _zeros(q.shape), _zeros(k.shape), _zeros(v.shape)
    dbias = None if bias is None else _zeros(bias.shape)
    dsinks = None if sinks is None else _zeros(sinks.shape)

    for b, h, i in itertools.product(range(n_b), range(n_hq), range(n_sq)):
        kvh = h // group  # consecutive query heads share a kv head
        keys = [j for j in range(n_sk) if vis[b, h, i, j]]
        # The sink: a logit used as given (no scale, bias, cap or mask) that attends to no value.
        sink = None if sinks is None or mpmath.isinf(sinks[h]) else sinks[h]
        if not keys and sink is None:
            continue
        pre: dict[int, mpmath.mpf] = {}  # biased logits, before softcap
        s: dict[int, mpmath.mpf] = {}
        for j in keys:
            z = mpmath.fsum(q[b, h, i, d] * k[b, kvh, j, d] for d in range(n_d)) * scale
            if bias is not None:
                z += bias[_bias_index(bias.shape, (b, h, i, j), full)]
            pre[j] = z
            s[j] = z if cap is None else cap * mpmath.tanh(z / cap)
        terms = [s[j] for j in keys] + ([] if sink is None else [sink])
        top = max(terms)
        denom = mpmath.fsum(mpmath.exp(t - top) for t in terms)
        lse[b, h, i] = top + mpmath.log(denom)
        p = {j: mpmath.exp(s[j] - lse[b, h, i]) for j in keys}
        for e in range(n_dv):
            out[b, h, i, e] = mpmath.fsum(p[j] * v[b, kvh, j, e] for j in keys)
        if d_out is None:
            continue
        if sink is not None:
            # d out[e] / d sink = -p_sink * out[e]
            p_sink = mpmath.exp(sink - lse[b, h, i])
            dsinks[h] -= p_sink * mpmath.fsum(d_out[b, h, i, e] * out[b, h, i, e] for e in range(n_dv))
        dp = {j: mpmath.fsum(d_out[b, h, i, e] * v[b, kvh, j, e] for e in range(n_dv)) for j in keys}
        expected_dp = mpmath.fsum(p[j] * dp[j] for j in keys)
        for j in keys:
            ds = p[j] * (dp[j] - expected_dp)
            dz = ds if cap is None else ds * (1 - mpmath.tanh(pre[j] / cap) ** 2)
            for d in range(n_d):
                dq[b, h, i, d] += dz * k[b, kvh, j, d] * scale
                dk[b, kvh, j, d] += dz * q[b, h, i, d] * scale
            for e in range(n_dv):
                dv[b, kvh, j, e] += p[j] * d_out[b, h, i, e]
            if dbias is not None:
                dbias[_bias_index(dbias.shape, (b, h, i, j), full)] += dz
    fully_masked = np.vectorize(mpmath.isinf, otypes=[bool])(lse)  # no key and no sink
    if d_out is None:
        return MpResult(out=out, lse=lse, fully_masked=fully_masked)
    return MpResult(
        out=out, lse=lse, fully_masked=fully_masked, dq=dq, dk=dk, dv=dv, dbias=dbias, dsinks=dsinks
    )


def _bias_index(shape: tuple[int, ...], index: tuple[int, ...], full: tuple[int, ...]) -> tuple[int, ...]:
    """Where a full [B, Hq, Sq, Sk] index lands in a broadcast operand: size-1 axes collapse to 0."""
    return tuple(0 if n == 1 and f != 1 else x for n, x, f in zip(shape, index, full, strict=True))


def _loss(
    spec: AttentionSpec, inputs: AttentionInputs, dout: np.ndarray, values: dict[str, np.ndarray]
) -> mpmath.mpf:
    """sum(out * dout) at the ambient precision (mpmath.diff raises it while it differentiates)."""
    res = _attention(spec, inputs, None, values)
    return mpmath.fsum(o * g for o, g in zip(res.out.ravel(), to_mp(dout).ravel(), strict=True))


def numerical_grad(spec: AttentionSpec, inputs: AttentionInputs, dout: np.ndarray, name: str) -> np.ndarray:
    """d loss / d ``name`` by ``mpmath.diff``, one element at a time (tiny shapes only)."""
    base = to_mp(getattr(inputs, name))
    grad = np.empty(base.shape, dtype=object)
    with mpmath.workdps(DIGITS):
        for idx in np.ndindex(*base.shape):
            if mpmath.isinf(base[idx]):
                grad[idx] = mpmath.mpf(0)  # a -inf bias entry is a mask: no gradient flows to it
                continue

            def f(x: mpmath.mpf, idx: tuple[int, ...] = idx) -> mpmath.mpf:
                moved = base.copy()
                moved[idx] = x
                return _loss(spec, inputs, dout, {name: moved})

            grad[idx] = mpmath.diff(f, base[idx])
    return grad

"""Float64 attention: the oracle every subject is judged against.

Semantics are those of ``reference.spec`` (prose: ``docs/semantics.md``).
The work is done per (batch, kv head) over chunks of query rows, so the
largest temporary is ``[G, chunk, Sk]`` rather than ``[Hq, Sq, Sk]``: a 32k x 32k
forward stays far below 1 GiB. Queries of one GQA group share a single GEMM
against their kv head, which is also how the kv heads are never repeated.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reference.masks import visible
from reference.spec import AttentionInputs, AttentionShape, AttentionSpec, Dropout, validate

# Elements per [G, chunk, Sk] logits block: 2^20 float64 = 8 MiB. Larger blocks
# amortise the per-block passes better; measured with ``python -m reference.bench``.
CHUNK_ELEMENTS = 1 << 20

DEFAULT_SPEC = AttentionSpec()  # frozen, so sharing one instance is safe


@dataclasses.dataclass(frozen=True, eq=False)
class ReferenceOutput:
    """out: [B, Hq, Sq, Dv]; lse: [B, Hq, Sq] (-inf on fully masked rows);
    fully_masked: [B, Hq, Sq] bool, rows whose softmax has no term: no visible key and no
    sink (out is 0 there). A row that sees no key but has a sink is not fully masked: its
    out is 0 and its lse the sink, by the formula."""

    out: np.ndarray
    lse: np.ndarray
    fully_masked: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class ReferenceGrads:
    """Gradients of ``sum(out * dout)``. dk, dv are summed over each GQA group;
    dbias has the bias's own (possibly broadcast) shape, or is None; dsinks: [Hq],
    summed over batch rows and query rows, or None without sinks."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dbias: np.ndarray | None
    dsinks: np.ndarray | None = None


def _as64(x: np.ndarray | None) -> np.ndarray | None:
    return None if x is None else np.asarray(x).astype(np.float64, copy=False)


def _upcast(inputs: AttentionInputs) -> AttentionInputs:
    return dataclasses.replace(
        inputs,
        q=_as64(inputs.q),
        k=_as64(inputs.k),
        v=_as64(inputs.v),
        bias=_as64(inputs.bias),
        sinks=_as64(inputs.sinks),
    )


def _chunk_rows(shape: AttentionShape) -> int:
    return max(1, CHUNK_ELEMENTS // (shape.group_size * shape.kv_len))


def _pick(arr: np.ndarray, axis_index: int | slice, size: int, axis: int) -> np.ndarray:
    """Index a broadcastable operand along one axis, keeping size-1 axes as they are."""
    if arr.shape[axis] == 1 and size != 1:
        return arr
    index = [slice(None)] * arr.ndim
    index[axis] = axis_index
    return arr[tuple(index)]


class _Blocks:
    """Logit blocks for one (batch, kv head): shared by forward and backward."""

    def __init__(self, spec: AttentionSpec, inputs: AttentionInputs, b: int, hk: int):
        shape = inputs.shape
        g = shape.group_size
        self.spec, self.inputs, self.b, self.shape = spec, inputs, b, shape
        self.heads = slice(hk * g, (hk + 1) * g)
        self.scale = spec.resolved_scale(shape.head_dim)
        # Folding the scale into q saves a full pass over every logits block.
        self.q = inputs.q[b, self.heads] * self.scale  # [G, Sq, D]
        self.q_raw = inputs.q[b, self.heads]
        self.k = inputs.k[b, hk]  # [Sk, D]
        self.v = inputs.v[b, hk]  # [Sk, Dv]
        # [G, 1, 1]: this group's sink logits, used as given (not scaled, biased or capped).
        self.sinks = None if inputs.sinks is None else inputs.sinks[self.heads][:, None, None]

    def logits(self, rows: slice) -> tuple[np.ndarray, np.ndarray | None]:
        """Masked logits [G, c, Sk] after scale, bias and softcap, plus tanh(z/c) for softcap's derivative."""
        g = self.shape.group_size
        q = self.q[:, rows]
        c = q.shape[1]
        s = (q.reshape(g * c, -1) @ self.k.T).reshape(g, c, -1)
        bias = None
        if self.inputs.bias is not None:
            bias = self.inputs.bias
            bias = bias[self.b if bias.shape[0] > 1 else 0]  # [Hb, Sqb, Skb]
            bias = _pick(bias, self.heads, self.shape.q_heads, 0)
            bias = _pick(bias, rows, self.shape.q_len, 1)
            s += bias
        tanh = None
        if self.spec.softcap is not None:
            s /= self.spec.softcap
            np.tanh(s, out=s)
            tanh = s.copy()
            s *= self.spec.softcap
            if bias is not None:
                # A -inf bias is a mask (docs/semantics.md); softcap would turn it into -c.
                np.copyto(s, -np.inf, where=np.isneginf(bias))
        vis = visible(self.spec, self.inputs, self.b, rows)
        if vis is not None:
            vis = _pick(vis, self.heads, self.shape.q_heads, 0)
            np.copyto(s, -np.inf, where=~vis)
        return s, tanh


def _dropout_block(dropout: np.ndarray | None, blocks: _Blocks, rows: slice) -> np.ndarray | None:
    """The [G|1, c|1, Sk] block of dropout's weights (``Dropout.weights``) for these rows, or None."""
    if dropout is None:
        return None
    w = dropout[blocks.b if dropout.shape[0] > 1 else 0]
    w = _pick(w, blocks.heads, blocks.shape.q_heads, 0)
    return _pick(w, rows, blocks.shape.q_len, 1)


def _row_chunks(shape: AttentionShape):
    step = _chunk_rows(shape)
    for start in range(0, shape.q_len, step):
        yield slice(start, min(start + step, shape.q_len))


def attention_forward(
    inputs: AttentionInputs, spec: AttentionSpec = DEFAULT_SPEC, dropout: Dropout | None = None
) -> ReferenceOutput:
    """Float64 forward pass. See ``ReferenceOutput`` for shapes. ``dropout``: the normalised weights
    times ``keep / (1 - rate)`` before they meet v; lse is the softmax's own (unchanged)."""
    shape = validate(inputs)
    weights = None if dropout is None else dropout.weights()
    inputs = _upcast(inputs)
    out = np.zeros((shape.batch, shape.q_heads, shape.q_len, shape.v_head_dim))
    lse = np.full((shape.batch, shape.q_heads, shape.q_len), -np.inf)
    g = shape.group_size
    for b in range(shape.batch):
        for hk in range(shape.kv_heads):
            blocks = _Blocks(spec, inputs, b, hk)
            for rows in _row_chunks(shape):
                s, _ = blocks.logits(rows)
                m = s.max(axis=-1, keepdims=True)
                if blocks.sinks is not None:
                    m = np.maximum(m, blocks.sinks)  # the sink is one more term of the max
                live = np.isfinite(m)
                m = np.where(live, m, 0.0)
                s -= m
                np.exp(s, out=s)
                denom = s.sum(axis=-1, keepdims=True)
                if blocks.sinks is not None:
                    denom = denom + np.exp(blocks.sinks - m)  # in the denominator only: no value
                c = s.shape[1]
                kept = _dropout_block(weights, blocks, rows)
                if kept is not None:
                    s *= kept  # the denominator is summed already: dropout leaves it as it is
                o = (s.reshape(g * c, -1) @ blocks.v).reshape(g, c, -1)
                live &= denom > 0
                safe = np.where(live, denom, 1.0)
                o /= safe
                o *= live  # fully masked rows: out = 0 by definition
                out[b, blocks.heads, rows] = o
                lse[b, blocks.heads, rows] = np.where(live, m + np.log(safe), -np.inf)[..., 0]
    return ReferenceOutput(out=out, lse=lse, fully_masked=~np.isfinite(lse))


def attention_backward(
    inputs: AttentionInputs,
    dout: np.ndarray,
    spec: AttentionSpec = DEFAULT_SPEC,
    forward: ReferenceOutput | None = None,
    dropout: Dropout | None = None,
) -> ReferenceGrads:
    """Float64 gradients of ``sum(out * dout)``; ``dout: [B, Hq, Sq, Dv]``.

    Pass the matching ``forward`` (computed with the same ``dropout``) to avoid recomputing it.
    Fully masked rows have out = 0 by definition, so they contribute no gradient. With
    ``dropout`` (weights W = keep / (1 - rate)): dv = (p W)^T dout, and d(weights) is
    W (dout v^T); delta = sum(dout * out) stays the softmax's, since sum_j p_ij W_ij (dout v^T)_ij
    is dout_i . out_i.
    """
    shape = validate(inputs)
    inputs = _upcast(inputs)
    dout = np.asarray(dout).astype(np.float64, copy=False)
    if dout.shape != (shape.batch, shape.q_heads, shape.q_len, shape.v_head_dim):
        expected = (shape.batch, shape.q_heads, shape.q_len, shape.v_head_dim)
        raise ValueError(f"dout must have out's shape {expected}, got {dout.shape}")
    fwd = forward if forward is not None else attention_forward(inputs, spec, dropout)
    weights = None if dropout is None else dropout.weights()
    g = shape.group_size
    dq = np.zeros_like(inputs.q)
    dk = np.zeros_like(inputs.k)
    dv = np.zeros_like(inputs.v)
    bias = inputs.bias
    dbias = None if bias is None else np.zeros_like(bias)
    dsinks = None if inputs.sinks is None else np.zeros_like(inputs.sinks)
    for b in range(shape.batch):
        for hk in range(shape.kv_heads):
            blocks = _Blocks(spec, inputs, b, hk)
            for rows in _row_chunks(shape):
                s, tanh = blocks.logits(rows)
                c = s.shape[1]
                lse = fwd.lse[b, blocks.heads, rows][..., None]
                live = np.isfinite(lse)
                s -= np.where(live, lse, 0.0)
                np.exp(s, out=s)
                s *= live  # p: [G, c, Sk]
                do = dout[b, blocks.heads, rows]  # [G, c, Dv]
                p2 = s.reshape(g * c, -1)
                do2 = do.reshape(g * c, -1)
                kept = _dropout_block(weights, blocks, rows)
                if kept is None:
                    dv[b, hk] += p2.T @ do2
                else:
                    dv[b, hk] += (s * kept).reshape(g * c, -1).T @ do2
                dp = (do2 @ blocks.v.T).reshape(g, c, -1)
                if kept is not None:
                    dp *= kept
                delta = np.sum(do * fwd.out[b, blocks.heads, rows], axis=-1, keepdims=True)
                if dsinks is not None:
                    # d out / d sink = -p_sink * out, with p_sink = exp(sink - lse).
                    p_sink = np.exp(blocks.sinks - np.where(live, lse, 0.0)) * live
                    dsinks[blocks.heads] -= (p_sink * delta).sum(axis=(1, 2))
                dp -= delta
                dp *= s  # d loss / d (capped logits)
                if tanh is not None:
                    dp *= 1.0 - tanh * tanh
                dz = dp.reshape(g * c, -1)
                dq[b, blocks.heads, rows] = (dz @ blocks.k).reshape(g, c, -1) * blocks.scale
                dk[b, hk] += (dz.T @ blocks.q_raw[:, rows].reshape(g * c, -1)) * blocks.scale
                if dbias is not None:
                    _accumulate_bias_grad(dbias, dp, b, blocks.heads, rows)
    return ReferenceGrads(dq=dq, dk=dk, dv=dv, dbias=dbias, dsinks=dsinks)


def _accumulate_bias_grad(dbias: np.ndarray, dz: np.ndarray, b: int, heads: slice, rows: slice) -> None:
    """Add a [G, c, Sk] block of d(logits) into dbias, summing over its broadcast axes."""
    if dbias.shape[3] == 1:
        dz = dz.sum(axis=2, keepdims=True)
    if dbias.shape[2] == 1:
        dz = dz.sum(axis=1, keepdims=True)
        rows = slice(None)
    if dbias.shape[1] == 1:
        dz = dz.sum(axis=0, keepdims=True)
        heads = slice(None)
    bi = 0 if dbias.shape[0] == 1 else b
    dbias[bi, heads, rows] += dz

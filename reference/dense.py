"""The float64 reference as short dense NumPy functions, one per feature.

A standalone repro script (``conformance/judge/standalone.py``) embeds the source of the
functions its case uses, so a reader sees only the masks and options that matter, and
the script needs nothing but NumPy. They hold whole ``[B, Hq, Sq, Sk]`` planes, which is
fine at the sizes a repro runs at; ``reference.attention`` is the chunked oracle the
suite judges with; ``tests/conformance/judge/test_standalone.py`` holds the two equal on every
feature. Semantics: ``docs/semantics.md``. A bias of -inf is a mask: a script ANDs
``~np.isneginf(bias)`` into ``visible`` (``reference/script.py``), so softcap cannot undo it.
"""

from __future__ import annotations

import numpy as np


def causal_visible(q_len: int, kv_len: int, offset: int):
    """[Sq, Sk] bool: key j is visible from query i iff j <= i + offset (the diagonal; offset
    0 for top-left alignment, Sk - Sq for bottom-right)."""
    return np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + offset


def chunk_visible(q_len: int, kv_len: int, offset: int, chunk: int):
    """[Sq, Sk] bool: key j is in the chunk of query i's diagonal, j // chunk == (i + offset) // chunk
    (chunks tile the key axis from key 0, floor division); ANDed with causal_visible it is chunked
    causal attention."""
    return np.arange(kv_len)[None, :] // chunk == (np.arange(q_len)[:, None] + offset) // chunk


def window_visible(q_len: int, kv_len: int, offset: int, left: int | None, right: int | None):
    """[Sq, Sk] bool: diag(i) - left <= j <= diag(i) + right, both edges inclusive,
    diag(i) = i + offset; None leaves that side unbounded."""
    diag = np.arange(q_len)[:, None] + offset
    j = np.arange(kv_len)[None, :]
    visible = np.ones((q_len, kv_len), dtype=bool)
    if left is not None:
        visible &= j >= diag - left
    if right is not None:
        visible &= j <= diag + right
    return visible


def segment_visible(q_segment_ids, kv_segment_ids):
    """[B, 1, Sq, Sk] bool: a query sees a key iff their segment ids ([B, Sq], [B, Sk]) are equal."""
    return q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :]


def length_visible(q_len: int, kv_len: int, q_lengths, kv_lengths):
    """[B, 1, Sq, Sk] bool: keys j >= kv_lengths[b] are padding; rows i >= q_lengths[b] see
    nothing. Either lengths array ([B] int) may be None."""
    batch = len(q_lengths if q_lengths is not None else kv_lengths)
    visible = np.ones((batch, 1, q_len, kv_len), dtype=bool)
    if kv_lengths is not None:
        visible &= np.arange(kv_len)[None, None, None, :] < np.asarray(kv_lengths)[:, None, None, None]
    if q_lengths is not None:
        visible &= np.arange(q_len)[None, None, :, None] < np.asarray(q_lengths)[:, None, None, None]
    return visible


def logits(q, k, scale: float):
    """[B, Hq, Sq, Sk] float64: (q . k) * scale. GQA: query head h reads kv head h // (Hq // Hkv)."""
    k = np.repeat(k.astype(np.float64), q.shape[1] // k.shape[1], axis=1)
    return (q.astype(np.float64) @ k.swapaxes(-1, -2)) * scale


def softcapped(s, cap: float):
    """(cap * tanh(s / cap), tanh(s / cap)): the capped logits and what their gradient needs."""
    tanh = np.tanh(s / cap)
    return cap * tanh, tanh


def softmax_attention(s, visible, v):
    """(out [B, Hq, Sq, Dv], lse [B, Hq, Sq], p [B, Hq, Sq, Sk]) of logits ``s`` over the visible
    keys. A row that sees no key has out = 0 and lse = -inf (docs/semantics.md)."""
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    live = denom > 0
    safe = np.where(live, denom, 1.0)
    p = e / safe
    v = np.repeat(v.astype(np.float64), s.shape[1] // v.shape[1], axis=1)
    return p @ v, np.where(live, m + np.log(safe), -np.inf)[..., 0], p


def sink_key(s, visible, v, sinks):
    """(s, visible, v) with the sinks ([Hq]) as one more key, the last: logit ``sinks[h]`` in every
    row of head h, always visible, value 0. ``softmax_attention`` then has the sink in its max and
    denominator and nothing of it in out, and its p's last column is the sink's share, p_sink
    (docs/semantics.md, "Attention sinks": the sink is used as given, after any softcap)."""
    b, hq, sq, sk = s.shape
    sink = np.broadcast_to(np.asarray(sinks, dtype=np.float64)[None, :, None, None], (b, hq, sq, 1))
    seen = np.concatenate([np.broadcast_to(visible, (b, hq, sq, sk)), np.ones((b, hq, sq, 1), bool)], axis=-1)
    zero = np.zeros((*v.shape[:2], 1, v.shape[3]))
    return np.concatenate([s, sink], axis=-1), seen, np.concatenate([v.astype(np.float64), zero], axis=2)


def sink_grad(p_sink, out, dout):
    """[Hq] gradient of sum(out * dout) by the sinks: -sum over batch and query rows of
    p_sink * (dout . out); ``p_sink`` [B, Hq, Sq] is the last column of ``sink_key``'s p."""
    return -(p_sink * (dout.astype(np.float64) * out).sum(axis=-1)).sum(axis=(0, 2))


def group_sum(x, kv_heads: int):
    """[B, Hq, S, D] -> [B, Hkv, S, D]: sum over the query heads that share each kv head."""
    b, hq, s, d = x.shape
    return x.reshape(b, kv_heads, hq // kv_heads, s, d).sum(axis=2)


def attention_grads(q, k, v, p, out, dout, scale: float, tanh=None):
    """(dq, dk, dv, dz) of sum(out * dout): p and out from ``softmax_attention``; ``tanh`` from
    ``softcapped`` when softcap is on. dz is the gradient of the logits before the cap (after
    scale and bias): a bias's gradient is dz summed over its broadcast axes."""
    q, k, v, dout = (x.astype(np.float64) for x in (q, k, v, dout))
    kv_heads = k.shape[1]
    group = q.shape[1] // kv_heads
    dv = group_sum(p.swapaxes(-1, -2) @ dout, kv_heads)
    dp = dout @ np.repeat(v, group, axis=1).swapaxes(-1, -2)
    delta = (dout * out).sum(axis=-1, keepdims=True)
    dz = p * (dp - delta)
    if tanh is not None:
        dz = dz * (1.0 - tanh * tanh)
    dq = (dz @ np.repeat(k, group, axis=1)) * scale
    dk = group_sum((dz.swapaxes(-1, -2) @ q) * scale, kv_heads)
    return dq, dk, dv, dz


def sum_to(x, shape: tuple[int, ...]):
    """Sum ``x`` over the axes where ``shape`` has size 1 (a broadcast bias's gradient)."""
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x

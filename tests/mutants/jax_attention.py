"""Correct attention, in small JAX pieces that the mutants reuse and break one at a time.

Canonical semantics (``docs/semantics.md``): q: [B, Hq, Sq, D], k: [B, Hkv, Sk, D],
v: [B, Hkv, Sk, Dv]; logits ``(q.k) * scale``, then bias, then softcap, then masks;
query head h reads kv head h // G. Work is in float32 whatever the input dtype (as XLA
does for bf16/f16), so a correct piece is at least as accurate as the suite's baseline.
Fully masked rows return 0 (lse -inf): the ``zeros`` convention.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Window = tuple[int | None, int | None] | None
HIGHEST = jax.lax.Precision.HIGHEST


def device(x: np.ndarray | None) -> jax.Array | None:
    """A NumPy input (bfloat16 included) as a JAX array; None stays None."""
    return None if x is None else jnp.asarray(x)


def host(x: jax.Array, dtype: np.dtype) -> np.ndarray:
    """A JAX result back on the host in ``dtype`` (the subject's output dtype)."""
    return np.asarray(x).astype(dtype)


def group(kv: jax.Array, q_heads: int) -> jax.Array:
    """[B, Hkv, Sk, X] -> [B, Hq, Sk, X]: query head h reads kv head h // G."""
    return jnp.repeat(kv, q_heads // kv.shape[1], axis=1)


def diagonal_offset(q_len: int, kv_len: int, alignment: str) -> int:
    """diag(i) - i: 0 top-left, Sk - Sq bottom-right."""
    return 0 if alignment == "top_left" else kv_len - q_len


def positions(q_len: int, kv_len: int, alignment: str) -> tuple[jax.Array, jax.Array]:
    """(diag [Sq, 1], j [1, Sk]): each query's diagonal and each key's index."""
    diag = jnp.arange(q_len)[:, None] + diagonal_offset(q_len, kv_len, alignment)
    return diag, jnp.arange(kv_len)[None, :]


def band(
    q_len: int, kv_len: int, *, causal: bool, alignment: str, window: Window, chunk: int | None = None
) -> jax.Array:
    """[Sq, Sk] bool: causal (j <= diag), chunk (j in diag's chunk of keys, chunks from key 0) and
    window (diag - left <= j <= diag + right)."""
    diag, j = positions(q_len, kv_len, alignment)
    keep = jnp.ones((q_len, kv_len), dtype=bool)
    if causal:
        keep &= j <= diag
    if chunk is not None:
        keep &= j // chunk == diag // chunk  # floor division, as canonical
    if window is not None:
        left, right = window
        if left is not None:
            keep &= j >= diag - left
        if right is not None:
            keep &= j <= diag + right
    return keep


def padding(q_len: int, kv_len: int, q_lengths: jax.Array | None, kv_lengths: jax.Array | None) -> jax.Array:
    """[B|1, 1, Sq, Sk] bool: key j < kv_lengths[b] and query i < q_lengths[b]."""
    keep = jnp.ones((1, 1, q_len, kv_len), dtype=bool)
    if kv_lengths is not None:
        keep = keep & (jnp.arange(kv_len)[None, None, None, :] < kv_lengths[:, None, None, None])
    if q_lengths is not None:
        keep = keep & (jnp.arange(q_len)[None, None, :, None] < q_lengths[:, None, None, None])
    return keep


def segments(q_segment_ids: jax.Array | None, kv_segment_ids: jax.Array | None) -> jax.Array | None:
    """[B, 1, Sq, Sk] bool: equal segment ids, or None without segment ids."""
    if q_segment_ids is None:
        return None
    return q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :]


def visibility(
    q_len: int,
    kv_len: int,
    *,
    causal: bool = False,
    alignment: str = "top_left",
    window: Window = None,
    chunk: int | None = None,
    q_segment_ids: jax.Array | None = None,
    kv_segment_ids: jax.Array | None = None,
    q_lengths: jax.Array | None = None,
    kv_lengths: jax.Array | None = None,
    mask: jax.Array | None = None,
) -> jax.Array:
    """[B|1, H|1, Sq, Sk] bool, True = may attend: every mask ANDed (docs/semantics.md)."""
    keep = band(q_len, kv_len, causal=causal, alignment=alignment, window=window, chunk=chunk)[None, None]
    keep = keep & padding(q_len, kv_len, q_lengths, kv_lengths)
    seg = segments(q_segment_ids, kv_segment_ids)
    if seg is not None:
        keep = keep & seg
    if mask is not None:
        keep = keep & mask
    return keep


def logits(
    q: jax.Array, k: jax.Array, scale: float, bias: jax.Array | None = None, softcap: float | None = None
) -> tuple[jax.Array, jax.Array | None]:
    """(s [B, Hq, Sq, Sk] float32, bias_mask): scaled, biased, capped logits. A -inf bias
    acts as a mask (also under softcap), so it is returned as a mask and zeroed in s."""
    k = group(k, q.shape[1])
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32), precision=HIGHEST) * scale
    bias_mask = None
    if bias is not None:
        bias = bias.astype(jnp.float32)
        bias_mask = ~jnp.isneginf(bias)
        s = s + jnp.where(bias_mask, bias, 0.0)
    if softcap is not None:
        s = softcap * jnp.tanh(s / softcap)
    return s, bias_mask


def softmax_attend(
    s: jax.Array,
    keep: jax.Array | None,
    v: jax.Array,
    sinks: jax.Array | None = None,
    max_axes: tuple[int, ...] = (-1,),
) -> tuple[jax.Array, jax.Array]:
    """(out [B, Hq, Sq, Dv], lse [B, Hq, Sq]), float32; rows with no visible key: out 0, lse -inf
    (lse = the sink with sinks [Hq]: one more logit in each row's denominator, no value).
    ``max_axes``: where the stabilising max is taken (a mutant widens it past the row)."""
    if keep is not None:
        s = jnp.where(keep, s, -jnp.inf)
    m = s.max(axis=max_axes, keepdims=True)
    sink = None if sinks is None else sinks.astype(jnp.float32)[None, :, None, None]
    if sink is not None:
        m = jnp.maximum(m, sink)
    m = jax.lax.stop_gradient(m)
    m = jnp.where(jnp.isfinite(m), m, 0.0)  # a fully masked row: exp(-inf - 0) = 0, no NaN
    e = jnp.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        denom = denom + jnp.exp(sink - m)
    empty = denom == 0
    p = e / jnp.where(empty, 1.0, denom)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, group(v, s.shape[1]).astype(jnp.float32), precision=HIGHEST)
    lse = jnp.where(empty, -jnp.inf, m + jnp.log(jnp.where(empty, 1.0, denom)))[..., 0]
    return out, lse


STATIC = ("scale", "causal", "alignment", "window", "softcap")
# ``attention`` also takes ``chunk`` (chunked causal): static too, for the functions that declare it.
STATIC_OPTIONS = (*STATIC, "chunk", "max_axes")


@functools.partial(jax.jit, static_argnames=STATIC_OPTIONS)
def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    q_segment_ids: jax.Array | None = None,
    kv_segment_ids: jax.Array | None = None,
    q_lengths: jax.Array | None = None,
    kv_lengths: jax.Array | None = None,
    sinks: jax.Array | None = None,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
    window: Window = None,
    softcap: float | None = None,
    chunk: int | None = None,
    max_axes: tuple[int, ...] = (-1,),
) -> tuple[jax.Array, jax.Array]:
    """Correct attention: (out [B, Hq, Sq, Dv], lse [B, Hq, Sq]) in float32; sinks: [Hq]."""
    s, bias_mask = logits(q, k, scale, bias, softcap)
    keep = visibility(
        q.shape[2],
        k.shape[2],
        causal=causal,
        alignment=alignment,
        window=window,
        chunk=chunk,
        q_segment_ids=q_segment_ids,
        kv_segment_ids=kv_segment_ids,
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
        mask=mask,
    )
    if bias_mask is not None:
        keep = keep & bias_mask
    return softmax_attend(s, keep, v, sinks, max_axes)


def call(fn: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, **keywords: Any) -> Any:
    """Run a jitted ``fn(q, k, v, <arrays>, **static)`` on NumPy inputs: the canonical keywords
    split into arrays (moved to the device) and static options."""
    arrays = {n: device(keywords.pop(n)) for n in list(keywords) if n not in STATIC_OPTIONS}
    return fn(device(q), device(k), device(v), **arrays, **keywords)

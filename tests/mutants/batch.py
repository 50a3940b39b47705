"""A mutant whose answer depends on the other requests of its batch, and only there: the
softmax's max is taken over the whole batch instead of per row.

Any constant subtracted before ``exp`` cancels in the softmax, so every output stays within
rounding of the right one (forward and lse pass), and a rerun of the same batch gives the same
bits (determinism passes). What changes is the rounding: ``exp(s - m)`` and its sum round
differently when ``m`` is a neighbour's, so a request's bits move with the batch it runs in,
which only ``batch_invariance`` (the request alone against the request in its batch) sees.
Kernels do this when they hoist a "safe" softmax constant out of the per-row loop.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tests.mutants import correct
from tests.mutants import jax_attention as core


def _softmax_over_batch_max(
    s: jax.Array, keep: jax.Array | None, v: jax.Array, sinks: jax.Array | None
) -> tuple[jax.Array, jax.Array]:
    """``core.softmax_attend`` with its one bug: the max over the batch's rows too."""
    if keep is not None:
        s = jnp.where(keep, s, -jnp.inf)
    m = s.max(axis=(0, 3), keepdims=True)  # BUG: one max per (head, query) over every request
    sink = None if sinks is None else sinks.astype(jnp.float32)[None, :, None, None]
    if sink is not None:
        m = jnp.maximum(m, sink)
    m = jax.lax.stop_gradient(m)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    e = jnp.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        denom = denom + jnp.exp(sink - m)
    empty = denom == 0
    p = e / jnp.where(empty, 1.0, denom)
    out = jnp.einsum(
        "bhqk,bhkd->bhqd", p, core.group(v, s.shape[1]).astype(jnp.float32), precision=core.HIGHEST
    )
    lse = jnp.where(empty, -jnp.inf, m + jnp.log(jnp.where(empty, 1.0, denom)))[..., 0]
    return out, lse


@functools.partial(jax.jit, static_argnames=core.STATIC_OPTIONS)
def _attention(
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
    window: core.Window = None,
    softcap: float | None = None,
    chunk: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``core.attention`` with the batch-wide max (same logits, masks and layout)."""
    s, bias_mask = core.logits(q, k, scale, bias, softcap)
    keep = core.visibility(
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
    return _softmax_over_batch_max(s, keep, v, sinks)


def batch_wide_max(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float, **keywords: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Attention whose softmax max spans the batch: (out, lse), right within rounding."""
    out, lse = core.call(_attention, q, k, v, scale=scale, **keywords)
    return core.host(out, q.dtype), np.asarray(lse)


# What the correct control declares: the same cases, so the control passes where this fails.
batch_wide_max.attention_capabilities = correct.FULL

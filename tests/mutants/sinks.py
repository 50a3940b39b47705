"""Mutants that get attention sinks wrong: the sink given a value, and the sink ignored."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import jax_attention as core

SINKS = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    segment_ids=True,
    gqa=True,
    sinks=True,
    lse=True,
    fully_masked_rows="zeros",
)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _sink_attends(
    q,
    k,
    v,
    q_segment_ids=None,
    kv_segment_ids=None,
    sinks=None,
    *,
    scale,
    causal=False,
    alignment="top_left",
    window=None,
    softcap=None,
):
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(
        q.shape[2],
        k.shape[2],
        causal=causal,
        q_segment_ids=q_segment_ids,
        kv_segment_ids=kv_segment_ids,
    )
    s = jnp.where(keep, s, -jnp.inf)
    sink = sinks.astype(jnp.float32)[None, :, None, None]
    m = jnp.maximum(s.max(axis=-1, keepdims=True), sink)
    e, e_sink = jnp.exp(s - m), jnp.exp(sink - m)
    denom = e.sum(axis=-1, keepdims=True) + e_sink
    v = core.group(v, q.shape[1]).astype(jnp.float32)
    # BUG: the sink attends to the mean of v, as if it were one more (average) key.
    numerator = jnp.einsum("bhqk,bhkd->bhqd", e, v, precision=core.HIGHEST) + e_sink * v.mean(
        axis=2, keepdims=True
    )
    return numerator / denom, (m + jnp.log(denom))[..., 0]


def sinks_in_numerator(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
    q_segment_ids: np.ndarray | None = None,
    kv_segment_ids: np.ndarray | None = None,
    sinks: np.ndarray | None = None,
):
    """The sink joins the numerator too, attending to mean(v); without sinks it is correct."""
    keywords = dict(scale=scale, causal=causal, alignment=alignment)
    segments = dict(q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids)
    if sinks is None:
        out, lse = core.call(core.attention, q, k, v, **segments, **keywords)
    else:
        out, lse = core.call(_sink_attends, q, k, v, **segments, sinks=sinks, **keywords)
    return core.host(out, q.dtype), np.asarray(lse)


sinks_in_numerator.attention_capabilities = SINKS


def sinks_ignored(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
    q_segment_ids: np.ndarray | None = None,
    kv_segment_ids: np.ndarray | None = None,
    sinks: np.ndarray | None = None,
):
    """Declares sinks and accepts them, then computes plain attention: the sink is dropped."""
    del sinks  # BUG: never reaches the softmax
    keywords = dict(scale=scale, causal=causal, alignment=alignment)
    segments = dict(q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids)
    out, lse = core.call(core.attention, q, k, v, **segments, **keywords)
    return core.host(out, q.dtype), np.asarray(lse)


sinks_ignored.attention_capabilities = SINKS

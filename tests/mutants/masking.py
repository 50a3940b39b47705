"""Mutants that let the wrong keys through: mask edges, alignment, windows, segments, and the
mapping of query heads and batch rows to their keys."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import jax_attention as core

CAUSAL_TL = Capabilities(jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",))


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _strict_causal(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    s, _ = core.logits(q, k, scale)
    keep = None
    if causal:
        diag, j = core.positions(q.shape[2], k.shape[2], alignment)
        keep = j < diag  # BUG: strict; a query must see its own diagonal key (j <= diag)
    return core.softmax_attend(s, keep, v)[0]


def causal_off_by_one(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Causal mask j < i instead of j <= i: every query loses its diagonal key."""
    out = core.call(_strict_causal, q, k, v, scale=scale, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


causal_off_by_one.attention_capabilities = CAUSAL_TL


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _bottom_right(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    s, _ = core.logits(q, k, scale)
    # BUG: the flash-attn >= 2.1 diagonal, whatever alignment was asked for.
    keep = core.band(q.shape[2], k.shape[2], causal=causal, alignment="bottom_right", window=None)
    return core.softmax_attend(s, keep[None, None], v)[0]


def causal_bottom_right(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Declares top-left causal but aligns the diagonal bottom-right (differs when Sq != Sk)."""
    out = core.call(_bottom_right, q, k, v, scale=scale, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


causal_bottom_right.attention_capabilities = CAUSAL_TL


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _exclusive_left(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    s, _ = core.logits(q, k, scale)
    keep = core.band(q.shape[2], k.shape[2], causal=causal, alignment=alignment, window=None)
    if window is not None:
        left, right = window
        diag, j = core.positions(q.shape[2], k.shape[2], alignment)
        if left is not None:
            keep &= j > diag - left  # BUG: exclusive; the left edge is inclusive
        if right is not None:
            keep &= j <= diag + right
    return core.softmax_attend(s, keep[None, None], v)[0]


def window_exclusive_left(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    window: tuple[int | None, int | None] | None = None,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Local window with an exclusive left edge: diag - left < j instead of <=."""
    out = core.call(_exclusive_left, q, k, v, scale=scale, window=window, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


window_exclusive_left.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",), window=True
)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _shifted_segments(
    q,
    k,
    v,
    q_segment_ids,
    kv_segment_ids,
    *,
    scale,
    causal=False,
    alignment="top_left",
    window=None,
    softcap=None,
):
    s, _ = core.logits(q, k, scale)
    # BUG: kv ids read one position late (an off-by-one in the key index), so each
    # segment's first key is filed under the previous segment.
    shifted = jnp.concatenate([kv_segment_ids[:, :1], kv_segment_ids[:, :-1]], axis=1)
    keep = core.visibility(
        q.shape[2],
        k.shape[2],
        causal=causal,
        alignment=alignment,
        q_segment_ids=q_segment_ids,
        kv_segment_ids=shifted,
    )
    return core.softmax_attend(s, keep, v)[0]


def segment_shifted_kv(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    q_segment_ids: np.ndarray | None = None,
    kv_segment_ids: np.ndarray | None = None,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Compares q segment ids with kv segment ids shifted by one key."""
    if q_segment_ids is None:
        out, _ = core.call(core.attention, q, k, v, scale=scale, causal=causal, alignment=alignment)
    else:
        out = core.call(
            _shifted_segments,
            q,
            k,
            v,
            q_segment_ids=q_segment_ids,
            kv_segment_ids=kv_segment_ids,
            scale=scale,
            causal=causal,
            alignment=alignment,
        )
    return core.host(out, q.dtype)


segment_shifted_kv.attention_capabilities = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    segment_ids=True,
    fully_masked_rows="zeros",
)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _modulo_heads(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    repeats = q.shape[1] // k.shape[1]
    # BUG: tile gives query head h kv head h % Hkv; canonical is h // G (repeat).
    k, v = jnp.tile(k, (1, repeats, 1, 1)), jnp.tile(v, (1, repeats, 1, 1))
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    return core.softmax_attend(s, keep, v)[0]


def gqa_modulo(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """GQA maps query head h to kv head h % Hkv instead of h // G."""
    return core.host(
        core.call(_modulo_heads, q, k, v, scale=scale, causal=causal, alignment=alignment), q.dtype
    )


gqa_modulo.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",), gqa=True
)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _first_batch_kv(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    # BUG: k/v of batch row 0 broadcast to every batch row (a batch stride of 0).
    k = jnp.broadcast_to(k[:1], k.shape)
    v = jnp.broadcast_to(v[:1], v.shape)
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    return core.softmax_attend(s, keep, v)[0]


def batch_zero_kv(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Every batch row attends to batch row 0's keys and values."""
    return core.host(
        core.call(_first_batch_kv, q, k, v, scale=scale, causal=causal, alignment=alignment), q.dtype
    )


batch_zero_kv.attention_capabilities = CAUSAL_TL


CHUNKED_TL = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    chunked_causal_alignments=("top_left",),
)


@functools.partial(jax.jit, static_argnames=(*core.STATIC, "chunk"))
def _chunk_exclusive_start(
    q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None, chunk=None
):
    s, _ = core.logits(q, k, scale)
    keep = core.band(q.shape[2], k.shape[2], causal=causal, alignment=alignment, window=None)
    if chunk is not None:
        diag, j = core.positions(q.shape[2], k.shape[2], alignment)
        keep &= j > diag - diag % chunk  # BUG: exclusive; a chunk's first key belongs to it (>=)
    return core.softmax_attend(s, keep[None, None], v)[0]


def chunk_edge_off_by_one(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
    chunk: int | None = None,
) -> np.ndarray:
    """Chunked causal with the chunk's first key left out: off by one at every chunk edge."""
    out = core.call(
        _chunk_exclusive_start, q, k, v, scale=scale, causal=causal, alignment=alignment, chunk=chunk
    )
    return core.host(out, q.dtype)


chunk_edge_off_by_one.attention_capabilities = CHUNKED_TL

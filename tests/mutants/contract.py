"""Mutants that compute attention but break the call contract: they write into their inputs,
return the wrong dtype or layout, a wrong lse, the wrong value on fully masked rows, or
skip an input validation they declare."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities, ShapeConstraint
from tests.mutants import jax_attention as core

CAUSAL_TL = Capabilities(jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",))


def _out(q: np.ndarray, k: np.ndarray, v: np.ndarray, **keywords) -> jax.Array:
    return core.call(core.attention, q, k, v, **keywords)[0]


def mutates_inputs(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Right answer, but pre-scales q in place (the caller's array changes)."""
    q *= q.dtype.type(scale)  # BUG: in place; `q = q * scale` was meant
    return core.host(_out(q, k, v, scale=1.0, causal=causal, alignment=alignment), q.dtype)


mutates_inputs.attention_capabilities = CAUSAL_TL


def wrong_dtype(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Right values, but returns the float32 accumulator instead of casting back to bf16."""
    return np.asarray(_out(q, k, v, scale=scale, causal=causal, alignment=alignment))  # BUG: no cast


wrong_dtype.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32", "bfloat16"), causal_alignments=("top_left",)
)


def wrong_layout(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Right values in jax.nn's [B, Sq, Hq, Dv] layout instead of canonical [B, Hq, Sq, Dv]."""
    out = _out(q, k, v, scale=scale, causal=causal, alignment=alignment)
    return core.host(jnp.swapaxes(out, 1, 2), q.dtype)  # BUG: transposed on the way out, not back


wrong_layout.attention_capabilities = CAUSAL_TL


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _lse_without_max(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    out, lse = core.attention(q, k, v, scale=scale, causal=causal, alignment=alignment)
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    m = jnp.where(keep, s, -jnp.inf).max(axis=-1)
    return out, lse - m  # BUG: log(sum(exp(s - m))); the max is never added back


def lse_missing_max(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> tuple[np.ndarray, np.ndarray]:
    """Right out; lse = log(sum(exp(s - max))) without adding the max back."""
    out, lse = core.call(_lse_without_max, q, k, v, scale=scale, causal=causal, alignment=alignment)
    return core.host(out, q.dtype), np.asarray(lse)


lse_missing_max.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",), lse=True
)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _finite_mask(
    q, k, v, q_lengths, kv_lengths, *, scale, causal=False, alignment="top_left", window=None, softcap=None
):
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(
        q.shape[2], k.shape[2], causal=causal, alignment=alignment, q_lengths=q_lengths, kv_lengths=kv_lengths
    )
    # BUG: a finite "minus infinity": a row that sees no key averages every value (mean(V)),
    # although the declared convention for such rows is zeros.
    s = jnp.where(keep, s, -0.7 * jnp.finfo(jnp.float32).max)
    return core.softmax_attend(s, None, v)[0]


def fully_masked_not_zero(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
    q_lengths: np.ndarray | None = None,
    kv_lengths: np.ndarray | None = None,
) -> np.ndarray:
    """Declares zeros on fully masked rows but masks with a finite value, so they get mean(V)."""
    out = core.call(
        _finite_mask,
        q,
        k,
        v,
        q_lengths=q_lengths,
        kv_lengths=kv_lengths,
        scale=scale,
        causal=causal,
        alignment=alignment,
    )
    return core.host(out, q.dtype)


fully_masked_not_zero.attention_capabilities = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left", "bottom_right"),
    lengths=True,
    fully_masked_rows="zeros",
)


def skips_validation(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Declares that Sk % 128 != 0 raises (as blocked kernels do) but never checks it."""
    return core.host(_out(q, k, v, scale=scale, causal=causal, alignment=alignment), q.dtype)


skips_validation.attention_capabilities = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    constraints=(
        ShapeConstraint(
            "kv_multiple_of_128",
            "keys come in blocks of 128",
            lambda shape, spec: shape.kv_len % 128 == 0,
            basis="raises",
        ),
    ),
)

"""Mutants that get the logits' arithmetic wrong: the scale, the bias order, the softcap."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from tests.mutants import jax_attention as core


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _inverse_d(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    s, _ = core.logits(q, k, 1.0 / q.shape[-1])  # BUG: 1/D, the given scale is ignored
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    return core.softmax_attend(s, keep, v)[0]


def scale_inverse_d(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Scales the logits by 1/D instead of the given scale (1/sqrt(D) by default)."""
    return core.host(core.call(_inverse_d, q, k, v, scale=scale, causal=causal, alignment=alignment), q.dtype)


scale_inverse_d.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",)
)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _bias_first(q, k, v, bias=None, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    # BUG: the TPU-flash order, (q.k + bias) * scale; canonical adds the bias after scaling.
    s, _ = core.logits(q, k, 1.0, bias)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    return core.softmax_attend(s * scale, keep, v)[0]


def bias_before_scale(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    bias: np.ndarray | None = None,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Adds the bias before scaling, so the bias is scaled too."""
    out = core.call(_bias_first, q, k, v, bias=bias, scale=scale, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


bias_before_scale.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",), bias=True, bias_broadcast=True
)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _tanh_unscaled(q, k, v, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    s, _ = core.logits(q, k, scale)
    if softcap is not None:
        s = softcap * jnp.tanh(s)  # BUG: c * tanh(s); canonical is c * tanh(s / c)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment)
    return core.softmax_attend(s, keep, v)[0]


def softcap_unscaled_tanh(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float,
    softcap: float | None = None,
    causal: bool = False,
    alignment: str = "top_left",
) -> np.ndarray:
    """Caps with c * tanh(s) instead of c * tanh(s / c) (right only when c = 1)."""
    out = core.call(_tanh_unscaled, q, k, v, scale=scale, softcap=softcap, causal=causal, alignment=alignment)
    return core.host(out, q.dtype)


softcap_unscaled_tanh.attention_capabilities = Capabilities(
    jax_runtime=True, dtypes=("float32",), causal_alignments=("top_left",), softcap=True
)

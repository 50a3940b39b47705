"""fp8 attention as fp8 kernels compute it, correct and wrong: plain functions (forward only).

q, k, v arrive in ``float8_e4m3fn`` or ``float8_e5m2``. A correct fp8 kernel feeds them to
matmuls that accumulate in float32, keeps logits and softmax in float32, and writes out in
bfloat16 (declared: ``Capabilities.output_dtypes``). Whether P is rounded to V's fp8 dtype
before the PV matmul is the kernel's choice, and it declares it
(``Capabilities.internal_quantization``): the baseline then does the same.

* ``attention``: P stays float32 (declares None). Control.
* ``attention_p_fp8``: P rounded to fp8, declared ``"p_fp8"``. Control.
* ``p_fp8_undeclared``: rounds P to fp8 but declares None. Mutant.
* ``logits_fp8``: rounds the scaled logits to fp8 before the softmax, a quantization no fp8
  kernel makes (P rounding is declared, so only the logits' is wrong). Mutant.
* ``attention_q_prescaled``: takes q already multiplied by the scale and rounded to fp8, as an
  API without a scale parameter makes every caller do (splash), declared
  ``q_prescaled=True``. Control.
* ``q_prescaled_undeclared``: the same rounding of ``q * scale`` to fp8, undeclared. Mutant.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities
from kernels.contract.dtypes import FP8_DTYPES

OUT_DTYPE = "bfloat16"


def _declare(internal_quantization: str | None, q_prescaled: bool = False) -> Capabilities:
    return Capabilities(
        jax_runtime=True,
        dtypes=FP8_DTYPES,
        causal_alignments=("top_left",),
        gqa=True,
        lse=True,
        fully_masked_rows="zeros",
        internal_quantization=internal_quantization,
        q_prescaled=q_prescaled,
        output_dtypes=tuple((d, OUT_DTYPE) for d in FP8_DTYPES),
    )


@functools.partial(jax.jit, static_argnames=("scale", "causal", "p_fp8", "logits_fp8", "prescaled"))
def _attention(q, k, v, *, scale, causal, p_fp8, logits_fp8, prescaled):
    """q: [B, Hq, Sq, D], k: [B, Hkv, Sk, D], v: [B, Hkv, Sk, Dv] in fp8 -> (out bf16, lse f32)."""
    group = q.shape[1] // k.shape[1]
    k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
    if prescaled:  # what a caller of an API without a scale passes: q * scale in q's dtype
        q = (q.astype(jnp.float32) * jnp.float32(scale)).astype(q.dtype)
        scale = 1.0
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * jnp.float32(scale)
    if logits_fp8:
        s = s.astype(q.dtype).astype(jnp.float32)
    if causal:
        keep = jnp.tril(jnp.ones(s.shape[-2:], dtype=bool))
        s = jnp.where(keep, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    e = jnp.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True)
    p = e / jnp.where(denom > 0, denom, 1.0)
    if p_fp8:
        p = p.astype(v.dtype)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, v, preferred_element_type=jnp.float32)
    return out.astype(OUT_DTYPE), (m + jnp.log(denom))[..., 0]


def _call(
    q,
    k,
    v,
    *,
    scale: float,
    causal: bool = False,
    p_fp8: bool,
    logits_fp8: bool = False,
    prescaled: bool = False,
    **_: Any,
):
    out, lse = _attention(
        jnp.asarray(q),
        jnp.asarray(k),
        jnp.asarray(v),
        scale=scale,
        causal=causal,
        p_fp8=p_fp8,
        logits_fp8=logits_fp8,
        prescaled=prescaled,
    )
    return np.asarray(out), np.asarray(lse)


def attention(q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left"):
    """Correct: P kept in float32."""
    return _call(q, k, v, scale=scale, causal=causal, p_fp8=False)


attention.attention_capabilities = _declare(None)


def attention_p_fp8(q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left"):
    """Correct: P rounded to V's fp8 dtype before the PV matmul, as declared."""
    return _call(q, k, v, scale=scale, causal=causal, p_fp8=True)


attention_p_fp8.attention_capabilities = _declare("p_fp8")


def p_fp8_undeclared(q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left"):
    """Wrong: rounds P to fp8 while declaring that P stays float32."""
    return _call(q, k, v, scale=scale, causal=causal, p_fp8=True)


p_fp8_undeclared.attention_capabilities = _declare(None)


def logits_fp8(q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left"):
    """Wrong: rounds the logits to fp8 before the softmax (P's rounding is declared)."""
    return _call(q, k, v, scale=scale, causal=causal, p_fp8=True, logits_fp8=True)


logits_fp8.attention_capabilities = _declare("p_fp8")


def attention_q_prescaled(q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left"):
    """Correct: computes with q * scale rounded to fp8, and declares it (an API without a scale)."""
    return _call(q, k, v, scale=scale, causal=causal, p_fp8=False, prescaled=True)


attention_q_prescaled.attention_capabilities = _declare(None, q_prescaled=True)


def q_prescaled_undeclared(q, k, v, *, scale: float, causal: bool = False, alignment: str = "top_left"):
    """Wrong: rounds q * scale to fp8 before the logits while declaring that the scale multiplies them."""
    return _call(q, k, v, scale=scale, causal=causal, p_fp8=False, prescaled=True)


q_prescaled_undeclared.attention_capabilities = _declare(None)

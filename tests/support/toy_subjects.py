"""Tiny subjects for the suite's own meta-tests: plain functions with the canonical signature
(``kernels/adapters/function_adapter.py``), reached as ``--impl tests.support.toy_subjects:<name>``.

``exact`` is float64 attention rounded to the input dtype: it must pass every check.
``scaled_wrong`` multiplies the logits by 1.25: the forward and lse checks must reject it.
``finite_mask`` masks with -1e30 (mean(v) on fully masked rows), declared or not;
``make_leaky()`` keeps every output; ``noisy`` flips a last bit now and then. ``lse_in_input_dtype``
rounds its lse to the inputs' dtype and returns it as float32; ``lse_returned_in_input_dtype`` returns it
in that dtype.
``Elsewhere`` is an adapter that is never available here (hardware this machine lacks).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from reference import AttentionInputs, AttentionSpec, attention_forward
from reference.masks import full_visibility

CAPS = Capabilities(
    dtypes=("float32", "float16"),
    causal_alignments=("top_left", "bottom_right"),
    lengths=True,
    lse=True,
    fully_masked_rows="zeros",
)


def _attention(q, k, v, scale, causal, alignment, q_lengths, kv_lengths):
    inputs = AttentionInputs(q=q, k=k, v=v, q_lengths=q_lengths, kv_lengths=kv_lengths)
    ref = attention_forward(inputs, AttentionSpec(scale=scale, causal=causal, alignment=alignment))
    return ref.out.astype(q.dtype), ref.lse.astype(np.float32)


def exact(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
    """float64 attention rounded to the input dtype."""
    return _attention(q, k, v, scale, causal, alignment, q_lengths, kv_lengths)


def scaled_wrong(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
    """Logits scaled by 1.25 x the right scale."""
    return _attention(q, k, v, 1.25 * scale, causal, alignment, q_lengths, kv_lengths)


exact.attention_capabilities = CAPS
scaled_wrong.attention_capabilities = CAPS


def _finite_mask(q, k, v, scale, causal, alignment, q_lengths, kv_lengths):
    """Attention that masks with a large finite negative number: fully masked rows get mean(v)."""
    inputs = AttentionInputs(q=q, k=k, v=v, q_lengths=q_lengths, kv_lengths=kv_lengths)
    spec = AttentionSpec(scale=scale, causal=causal, alignment=alignment)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    s = np.where(full_visibility(spec, inputs), s, -1e30)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    return (p @ v.astype(np.float64)).astype(q.dtype), lse.astype(np.float32)


def finite_mask(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
    """Large-negative masking; declares the mean_v convention."""
    return _finite_mask(q, k, v, scale, causal, alignment, q_lengths, kv_lengths)


def finite_mask_claims_zeros(
    q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None
):
    """Large-negative masking, but declares zeros on fully masked rows."""
    return _finite_mask(q, k, v, scale, causal, alignment, q_lengths, kv_lengths)


def make_leaky():
    """A correct subject that keeps every output alive, as a NumPy copy and as a JAX array
    (a per-call leak in host memory and in live JAX arrays; it runs on JAX, so it says so)."""
    import jax.numpy as jnp

    kept = []

    def leaky(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
        result = _attention(q, k, v, scale, causal, alignment, q_lengths, kv_lengths)
        kept.append((result[0].copy(), jnp.asarray(result[0])))
        return result

    leaky.attention_capabilities = dataclasses.replace(CAPS, jax_runtime=True)
    return leaky


_NOISY_CALLS = itertools.count()  # call parity: a toy subject's own state


def noisy(q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None):
    """Correct to rounding, but the last bit of one element flips from call to call (every
    other call, so two calls in a row always differ: a coin flip let the test pass 1 in 64)."""
    out, lse = _attention(q, k, v, scale, causal, alignment, q_lengths, kv_lengths)
    if next(_NOISY_CALLS) % 2:
        out.flat[0] = np.nextafter(out.flat[0], np.inf, dtype=out.dtype)
    return out, lse


finite_mask.attention_capabilities = dataclasses.replace(CAPS, fully_masked_rows="mean_v")
finite_mask_claims_zeros.attention_capabilities = CAPS
noisy.attention_capabilities = CAPS


class Elsewhere:
    """An adapter for hardware this machine lacks: unavailable, with its reason."""

    name = "elsewhere"
    description = "a kernel for an accelerator that is not here"
    REASON = "needs an accelerator this machine lacks"

    def availability(self) -> Availability:
        return Availability(False, self.REASON)

    def capabilities(self) -> Capabilities:
        return CAPS

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        raise RuntimeError(self.REASON)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise RuntimeError(self.REASON)


def lse_in_input_dtype(
    q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None
):
    """``exact``, but its lse rounded to the inputs' dtype and handed back as float32: a kernel that
    stores lse in its storage dtype, upcast by its adapter. Returned as float32, it must be as good
    as a float32 lse."""
    out, lse = _attention(q, k, v, scale, causal, alignment, q_lengths, kv_lengths)
    return out, lse.astype(q.dtype).astype(np.float32)


lse_in_input_dtype.attention_capabilities = CAPS


def lse_returned_in_input_dtype(
    q, k, v, *, scale, causal=False, alignment="top_left", q_lengths=None, kv_lengths=None
):
    """``exact`` with its lse returned in the inputs' dtype: the storage it shows is the one it is
    judged in (as jax.nn returns its lse in k's dtype)."""
    out, lse = _attention(q, k, v, scale, causal, alignment, q_lengths, kv_lengths)
    return out, lse.astype(q.dtype)


lse_returned_in_input_dtype.attention_capabilities = CAPS

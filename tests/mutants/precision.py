"""Mutants of precision: a gradient whose tolerance a trivially wrong answer would meet, and a
reduction summed in the storage dtype. Their control, ``CarefulAdapter``, computes everything
in float32 from the stored inputs and stores its results in the inputs' dtype: the arithmetic
the baseline's contract promises (``conformance/judge/baseline.py``).

Each is an adapter class (plain functions are forward-only), reached as
``--impl tests.mutants.precision:<Class>``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core

CAREFUL = Capabilities(
    jax_runtime=True,
    dtypes=("bfloat16", "float8_e5m2"),  # the dtypes whose precision the mutants get wrong
    causal_alignments=("top_left",),
    gqa=True,
    sinks=True,
    sinks_grad=True,
    backward=True,
    lse=True,
    fully_masked_rows="zeros",
)


def _visible_logits(q, k, causal, scale):
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal)
    return jnp.where(keep, s, -jnp.inf)


def _attention(q, k, v, sinks, *, scale, causal, denominator):
    """(out, lse), float32 from the stored inputs; ``denominator`` sums the softmax's terms."""
    s = _visible_logits(q, k, causal, scale)
    sink = sinks.astype(jnp.float32)[None, :, None, None]
    m = jnp.maximum(s.max(axis=-1, keepdims=True), sink)
    e, e_sink = jnp.exp(s - m), jnp.exp(sink - m)
    denom = denominator(e) + e_sink
    vg = core.group(v, q.shape[1]).astype(jnp.float32)
    out = jnp.einsum("bhqk,bhkd->bhqd", e / denom, vg, precision=core.HIGHEST)
    return out, (m + jnp.log(denom))[..., 0]


def _float32_sum(e):
    return e.sum(axis=-1, keepdims=True)


def _storage_sum(dtype):
    """The softmax's sum with a running total in ``dtype``, one key at a time, as a kernel whose
    accumulator is the inputs' dtype adds them: each partial sum rounded."""

    def total(e):
        def add(acc, column):
            return (acc + column.astype(dtype)).astype(dtype), None

        acc, _ = jax.lax.scan(add, jnp.zeros(e.shape[:-1], dtype), jnp.moveaxis(e, -1, 0))
        return acc.astype(jnp.float32)[..., None]

    return total


@functools.partial(jax.jit, static_argnames=("scale", "causal", "storage_sum"))
def _forward(q, k, v, sinks, *, scale, causal, storage_sum):
    denominator = _storage_sum(q.dtype) if storage_sum else _float32_sum
    return _attention(q, k, v, sinks, scale=scale, causal=causal, denominator=denominator)


@functools.partial(jax.jit, static_argnames=("scale", "causal", "storage_sum"))
def _gradients(q, k, v, sinks, dout, *, scale, causal, storage_sum):
    denominator = _storage_sum(q.dtype) if storage_sum else _float32_sum

    def out_of(q, k, v, sinks):
        return _attention(q, k, v, sinks, scale=scale, causal=causal, denominator=denominator)[0]

    f32 = [x.astype(jnp.float32) for x in (q, k, v, sinks)]
    _, pullback = jax.vjp(out_of, *f32)
    return pullback(dout.astype(jnp.float32))


@dataclasses.dataclass(frozen=True, eq=False)
class CarefulAdapter:
    """Correct in every dtype it declares: float32 arithmetic, results stored in the inputs'
    dtype, sinks and their gradient included (no sink: a sink of -inf, which adds nothing)."""

    name: str = "mutants_careful_precision"
    description: str = "float32 arithmetic from stored inputs, results stored in their dtype"
    storage_sum: bool = False

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "JAX, in this process")

    def capabilities(self) -> Capabilities:
        return CAREFUL

    def _sinks(self, inputs: AttentionInputs) -> np.ndarray:
        if inputs.sinks is not None:
            return inputs.sinks
        return np.full((inputs.q.shape[1],), -np.inf, dtype=np.float32)

    def _keywords(self, spec: AttentionSpec, inputs: AttentionInputs) -> dict:
        scale = spec.resolved_scale(inputs.q.shape[-1])
        return dict(scale=scale, causal=spec.causal, storage_sum=self.storage_sum)

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        arrays = [core.device(x) for x in (inputs.q, inputs.k, inputs.v, self._sinks(inputs))]
        out, lse = _forward(*arrays, **self._keywords(spec, inputs))
        return SubjectOutput(out=core.host(out, inputs.q.dtype), lse=np.asarray(lse), ran=self.name)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        arrays = [core.device(x) for x in (inputs.q, inputs.k, inputs.v, self._sinks(inputs), dout)]
        dq, dk, dv, dsinks = _gradients(*arrays, **self._keywords(spec, inputs))
        dtype = inputs.q.dtype
        sinks_grad = None if inputs.sinks is None else core.host(dsinks, inputs.sinks.dtype)
        return SubjectGrads(
            dq=core.host(dq, dtype), dk=core.host(dk, dtype), dv=core.host(dv, dtype), dsinks=sinks_grad
        )


@dataclasses.dataclass(frozen=True, eq=False)
class SinkGradientSignE5m2(CarefulAdapter):
    """BUG: in float8_e5m2, d(sinks) comes back with its sign flipped (an e5m2-only path gets the
    sign of ``-sum p_sink * delta`` wrong). Its tolerance used to be 2 ulps of e5m2 at the
    cancelling terms (31.8 where the answer is 4.4): the sign flip passed."""

    name: str = "mutants_sink_gradient_sign_e5m2"

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        grads = super().gradients(inputs, spec, dout)
        if grads.dsinks is None or inputs.q.dtype != np.dtype(ml_dtypes.float8_e5m2):
            return grads
        return dataclasses.replace(
            grads, dsinks=(-grads.dsinks.astype(np.float32)).astype(grads.dsinks.dtype)
        )


@dataclasses.dataclass(frozen=True, eq=False)
class StorageDtypeSum(CarefulAdapter):
    """BUG: the softmax's denominator is summed with an accumulator in the inputs' dtype (each
    partial sum rounded to bfloat16 or fp8), not in float32."""

    name: str = "mutants_storage_dtype_sum"
    storage_sum: bool = True

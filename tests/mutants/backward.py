"""A mutant whose forward is right and whose hand-written backward is not.

Plain functions are forward-only (``kernels/adapters/function_adapter.py``), so this one is an adapter
class, reached as ``--impl tests.mutants.backward:WrongDkAdapter``. Its control, the
same adapter with autodiff gradients, is ``tests.mutants.correct:CorrectAdapter``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import correct
from tests.mutants import jax_attention as core


def _flash_backward(q, k, v, out, lse, dout, scale, causal):
    """Flash-attention-style gradients from the saved lse, float32, canonical layout."""
    groups = q.shape[1] // k.shape[1]
    kg, vg = core.group(k, q.shape[1]), core.group(v, q.shape[1])
    s, _ = core.logits(q, k, scale)
    keep = core.visibility(q.shape[2], k.shape[2], causal=causal)
    p = jnp.where(keep, jnp.exp(s - lse[..., None]), 0.0)
    dv = jnp.einsum("bhqk,bhqd->bhkd", p, dout, precision=core.HIGHEST)
    dp = jnp.einsum("bhqd,bhkd->bhqk", dout, vg, precision=core.HIGHEST)
    delta = (dout * out).sum(axis=-1, keepdims=True)
    ds = p * (dp - delta)
    dq = jnp.einsum("bhqk,bhkd->bhqd", ds, kg, precision=core.HIGHEST) * scale
    dk = jnp.einsum("bhqk,bhqd->bhkd", ds, q, precision=core.HIGHEST)  # BUG: the "* scale" is missing

    def per_kv_head(x):
        return x.reshape(x.shape[0], k.shape[1], groups, *x.shape[2:]).sum(axis=2)

    return dq, per_kv_head(dk), per_kv_head(dv)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _attention(q, k, v, scale, causal):
    return core.attention(q, k, v, scale=scale, causal=causal)[0]


def _fwd(q, k, v, scale, causal):
    out, lse = core.attention(q, k, v, scale=scale, causal=causal)
    return out, (q, k, v, out, lse)


def _bwd(scale, causal, residuals, dout):
    return _flash_backward(*residuals, dout, scale, causal)


_attention.defvjp(_fwd, _bwd)


@functools.partial(jax.jit, static_argnames=("scale", "causal"))
def _gradients(q, k, v, dout, *, scale, causal):
    _, pullback = jax.vjp(lambda q, k, v: _attention(q, k, v, scale, causal), q, k, v)
    return pullback(dout)


@dataclasses.dataclass(frozen=True, eq=False)
class WrongDkAdapter:
    """Correct forward; a custom_vjp backward that forgets to scale dk."""

    name: str = "mutants_wrong_dk"
    description: str = "custom_vjp attention whose dk misses the softmax scale"

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "JAX, in this process")

    def capabilities(self) -> Capabilities:
        return correct.BACKWARD

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        out, lse = correct.attention(inputs.q, inputs.k, inputs.v, **correct.keywords(inputs, spec))
        return SubjectOutput(out=out, lse=lse, ran=self.name)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        f32 = [core.device(x.astype(np.float32)) for x in (inputs.q, inputs.k, inputs.v, dout)]
        grads = _gradients(*f32, scale=spec.resolved_scale(inputs.q.shape[-1]), causal=spec.causal)
        dq, dk, dv = (core.host(g, inputs.q.dtype) for g in grads)
        return SubjectGrads(dq=dq, dk=dk, dv=dv)

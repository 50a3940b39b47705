"""Attention dropout (the ``dropout`` check): controls that apply the mask as docs/semantics.md
says (after the softmax, times ``1 / (1 - rate)``, in both directions), for an API that takes the
mask (``MaskDropout``) and one that draws it from a key (``KeyDropout``); and mutants of each: the
mask applied in the forward but not the backward, the mask ignored (an answer without dropout,
which must not earn a pass), and a drawn mask whose drop rate is not the one requested."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Capabilities, SubjectGrads, SubjectOutput
from kernels.contract.dropout import DropoutRequest
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core
from tests.mutants.correct import BACKWARD, CorrectAdapter, keywords


@functools.partial(jax.jit, static_argnames=core.STATIC)
def dropout_attention(
    q, k, v, weights, *, scale, causal=False, alignment="top_left", window=None, softcap=None
):
    """out ``[B, Hq, Sq, Dv]`` float32: the normalised weights times ``weights`` (``keep / (1 - rate)``,
    ``[B, Hq, Sq, Sk]``; None: no dropout) before they meet v."""
    s, _ = core.logits(q, k, scale, None, softcap)
    visible = core.visibility(q.shape[2], k.shape[2], causal=causal, alignment=alignment, window=window)
    s = jnp.where(visible, s, -jnp.inf)
    m = jax.lax.stop_gradient(s.max(axis=-1, keepdims=True))
    e = jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0))
    denom = e.sum(axis=-1, keepdims=True)
    p = e / jnp.where(denom == 0, 1.0, denom)
    if weights is not None:
        p = p * weights
    v = core.group(v, q.shape[1]).astype(jnp.float32)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v, precision=core.HIGHEST)


def _static(inputs: AttentionInputs, spec: AttentionSpec) -> dict:
    return {n: value for n, value in keywords(inputs, spec).items() if n in core.STATIC}


@dataclasses.dataclass(frozen=True, eq=False)
class MaskDropout(CorrectAdapter):
    """Control: takes the keep mask and the rate (``Capabilities.dropout`` "mask"), applied after the
    softmax in the forward, and the same mask in the backward (``jax.vjp`` of that forward)."""

    name: str = "mutants_dropout_mask_correct"
    description: str = "correct JAX attention with the caller's dropout mask, both directions"

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(BACKWARD, dropout="mask")

    def keep(self, request: DropoutRequest, shape: tuple[int, ...]) -> jax.Array:
        """The mask applied: the request's."""
        return jnp.asarray(request.keep)

    def forward_weights(self, weights: jax.Array) -> jax.Array | None:
        return weights

    def backward_weights(self, weights: jax.Array) -> jax.Array | None:
        return weights

    def dropout(
        self,
        inputs: AttentionInputs,
        spec: AttentionSpec,
        request: DropoutRequest,
        dout: np.ndarray | None = None,
    ) -> SubjectOutput | SubjectGrads:
        b, hq, sq, _ = inputs.q.shape
        keep = self.keep(request, (b, hq, sq, inputs.k.shape[2]))
        weights = keep.astype(jnp.float32) / jnp.float32(1.0 - request.rate)
        static = _static(inputs, spec)
        q, k, v = (jnp.asarray(x) for x in (inputs.q, inputs.k, inputs.v))
        if dout is None:
            out = dropout_attention(q, k, v, self.forward_weights(weights), **static)
            return SubjectOutput(out=core.host(out, inputs.q.dtype), ran=self.name)
        backward = self.backward_weights(weights)
        _, pullback = jax.vjp(lambda q, k, v: dropout_attention(q, k, v, backward, **static), q, k, v)
        dq, dk, dv = (core.host(g, inputs.q.dtype) for g in pullback(jnp.asarray(dout, jnp.float32)))
        return SubjectGrads(dq=dq, dk=dk, dv=dv)


@dataclasses.dataclass(frozen=True, eq=False)
class ForwardOnlyDropout(MaskDropout):
    """The mask applied in the forward; the backward differentiates attention without it."""

    name: str = "mutants_dropout_forward_only"
    description: str = "dropout mask in the forward, gradients of attention without dropout"

    def backward_weights(self, weights: jax.Array) -> jax.Array | None:
        return None  # BUG: the backward forgets the mask


@dataclasses.dataclass(frozen=True, eq=False)
class MaskIgnored(MaskDropout):
    """Takes the mask and ignores it: the answer without dropout (must not earn a pass)."""

    name: str = "mutants_dropout_mask_ignored"
    description: str = "dropout mask accepted and ignored in both directions"

    def forward_weights(self, weights: jax.Array) -> jax.Array | None:
        return None  # BUG: the mask ignored in the forward (and the backward below)

    def backward_weights(self, weights: jax.Array) -> jax.Array | None:
        return None


@dataclasses.dataclass(frozen=True, eq=False)
class KeyDropout(MaskDropout):
    """Control: takes the rate and a key (``Capabilities.dropout`` "key") and draws the mask inside,
    each weight kept with probability ``1 - rate`` (``jax.random.bernoulli``), the same mask under the
    same key in both directions."""

    name: str = "mutants_dropout_key_correct"
    description: str = "correct JAX attention drawing its dropout mask from a key"

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(BACKWARD, dropout="key")

    def drop_probability(self, rate: float) -> float:
        return rate

    def keep(self, request: DropoutRequest, shape: tuple[int, ...]) -> jax.Array:
        key = jax.random.key(request.seed)
        return jax.random.bernoulli(key, 1.0 - self.drop_probability(request.rate), shape)


@dataclasses.dataclass(frozen=True, eq=False)
class RateOff(KeyDropout):
    """Draws its mask at 0.8 times the requested rate and scales by the requested one: every
    realised weight is right, the rate is not (only the binomial test sees it)."""

    name: str = "mutants_dropout_rate_off"
    description: str = "a drawn dropout mask at 0.8 x the requested rate"

    def drop_probability(self, rate: float) -> float:
        return 0.8 * rate  # BUG: not the requested rate

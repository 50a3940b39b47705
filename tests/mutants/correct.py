"""Correct controls: what every mutant breaks, and what the suite must accept.

``attention`` is a plain function declaring every feature the suite knows (forward
only, as plain functions are) except bottom-right alignment: ``kernels.adapters.function_adapter`` passes
``alignment`` only with ``causal=True``, so a function cannot place a non-causal window
bottom-right, and Capabilities cannot declare one without the other.
``CorrectAdapter`` adds gradients (``jax.vjp`` of the same code): the control for the
wrong-backward mutant.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core

FULL = Capabilities(
    jax_runtime=True,
    dtypes=("float32", "bfloat16", "float16"),
    causal_alignments=("top_left",),
    chunked_causal_alignments=("top_left",),
    window=True,
    segment_ids=True,
    lengths=True,
    bool_mask=True,
    gqa=True,
    bias=True,
    bias_broadcast=True,
    softcap=True,
    sinks=True,
    distinct_v_dim=True,
    lse=True,
    fully_masked_rows="zeros",
)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float, **keywords: Any):
    """Correct JAX attention (float32 softmax), every feature; returns (out, lse)."""
    out, lse = core.call(core.attention, q, k, v, scale=scale, **keywords)
    return core.host(out, q.dtype), np.asarray(lse)


attention.attention_capabilities = FULL


def keywords(inputs: AttentionInputs, spec: AttentionSpec) -> dict[str, Any]:
    """The canonical keywords of an adapter call (as ``kernels.adapters.function_adapter`` passes them)."""
    from kernels.adapters.function_adapter import canonical_keywords

    return canonical_keywords(inputs, spec)


@functools.partial(jax.jit, static_argnames=core.STATIC)
def _gradients(q, k, v, dout, *, scale, causal=False, alignment="top_left", window=None, softcap=None):
    def out_of(q, k, v):
        return core.attention(
            q, k, v, scale=scale, causal=causal, alignment=alignment, window=window, softcap=softcap
        )[0]

    _, pullback = jax.vjp(out_of, q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    return pullback(dout.astype(np.float32))


BACKWARD = Capabilities(
    jax_runtime=True,
    dtypes=("float32",),
    causal_alignments=("top_left",),
    gqa=True,
    backward=True,
    lse=True,
    fully_masked_rows="zeros",
)


@dataclasses.dataclass(frozen=True, eq=False)
class CorrectAdapter:
    """Correct forward and autodiff backward (float32, causal top-left, GQA)."""

    name: str = "mutants_correct_backward"
    description: str = "correct JAX attention with jax.vjp gradients"

    def availability(self) -> Availability:
        return Availability(True, "", (), "native", "JAX, in this process")

    def capabilities(self) -> Capabilities:
        return BACKWARD

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        out, lse = attention(inputs.q, inputs.k, inputs.v, **keywords(inputs, spec))
        return SubjectOutput(out=out, lse=lse, ran=self.name)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        grads = core.call(_gradients, inputs.q, inputs.k, inputs.v, dout=dout, **keywords(inputs, spec))
        dq, dk, dv = (core.host(g, inputs.q.dtype) for g in grads)
        return SubjectGrads(dq=dq, dk=dk, dv=dv)

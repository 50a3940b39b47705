"""Correct controls: what every mutant breaks, and what the suite must accept.

``attention`` is a plain function (forward only, as plain functions are) declaring every feature
of the table (``kernels/contract/features.py``) it can do: ``DECLARED``, each feature's value of
its ``Capabilities`` attribute. The ones it cannot do are in ``NOT_DECLARED`` with the reason.
Every feature is in one of the two (``tests/mutants/test_correct_control.py``), so a feature
added to the table fails that test until someone decides which.
``CorrectAdapter`` adds gradients (``jax.vjp`` of the same code): the control for the
wrong-backward mutant.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from kernels.contract import features
from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core

# Feature name -> what ``attention`` declares for it (its ``Capabilities`` attribute's value).
DECLARED: dict[str, Any] = {
    # Top-left only: ``kernels.adapters.function_adapter`` passes ``alignment`` only with
    # ``causal=True``, so a function cannot place a non-causal window bottom-right, and
    # Capabilities cannot declare one alignment for causal and another for the window.
    "causal": ("top_left",),
    "chunked_causal": ("top_left",),
    "window": True,
    "segment_ids": True,
    "lengths": True,
    "bool_mask": True,
    "bias": True,
    "bias_fill": True,  # the bias's own attribute: a -inf bias masks (jax_attention.logits)
    "softcap": True,
    "scale": True,  # no attribute: every subject takes a scale
    "sinks": True,
    "gqa": True,
    "dv_ne_d": True,
}
# Feature name -> why ``attention`` does not declare it (each has a control of its own).
NOT_DECLARED: dict[str, str] = {
    "q_storage": (
        "it reads q as plain values and takes no q_storage keyword; a call that dequantizes a stored "
        "q is tests/mutants/quantized.py's per_call control"
    ),
    "kv_storage": (
        "it reads K/V as plain values and takes no kv_storage keyword; stored K/V have the "
        "controls of tests/mutants/quantized.py (per_call, int8_per_channel, fp8_per_head)"
    ),
    "leading_batch_dims": (
        "it takes one batch axis, [B, ...]; q, k, v as [*batch_dims, ...] are "
        "tests/mutants/leading_batch.py's attention"
    ),
}


def declared_capabilities(declared: dict[str, Any]) -> dict[str, Any]:
    """``Capabilities`` keywords from feature name -> value: each feature's attribute (features
    that share one must agree; a feature no attribute declares adds none)."""
    out: dict[str, Any] = {}
    for name, value in declared.items():
        attribute = features.BY_NAME[name].capability
        if attribute is None:
            continue
        if out.setdefault(attribute, value) != value:
            raise ValueError(f"{name} declares {attribute}={value!r}, another feature {out[attribute]!r}")
    return out


FULL = Capabilities(
    jax_runtime=True,
    dtypes=("float32", "bfloat16", "float16"),
    bias_broadcast=True,
    lse=True,
    fully_masked_rows="zeros",
    **declared_capabilities(DECLARED),
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

"""Tiny subjects for the suite's own meta-tests: plain functions with the canonical signature
(``kernels/plugin.py``), reached as ``--impl tests.conformance.toy_subjects:<name>``.

``exact`` is float64 attention rounded to the input dtype: it must pass every check.
``scaled_wrong`` multiplies the logits by 1.25: the forward and lse checks must reject it.
"""

from __future__ import annotations

import numpy as np

from kernels.base import Capabilities
from reference import AttentionInputs, AttentionSpec, attention_forward

CAPS = Capabilities(dtypes=("float32", "float16"), causal_alignments=("top_left", "bottom_right"),
                    lengths=True, lse=True, fully_masked_rows="zeros")


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

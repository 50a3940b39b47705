"""Visibility written straight from the prose of docs/semantics.md, one (b, h, i, j) at a time.

Deliberately shares no code with ``reference/masks.py``: the reference builds
masks with broadcasting over query chunks, this module with plain loops over
the sentences of the spec, so a slip in one is unlikely to repeat in the other.
"""

from __future__ import annotations

import math

import numpy as np

from reference.spec import AttentionInputs, AttentionSpec


def diag(spec: AttentionSpec, i: int, q_len: int, kv_len: int) -> int:
    """``top_left``: diag(i) = i; ``bottom_right``: diag(i) = i + Sk - Sq (tensor lengths);
    ``bottom_right_valid``: the same with the row's valid lengths (the caller passes those)."""
    return i if spec.alignment == "top_left" else i + kv_len - q_len


def may_attend(spec: AttentionSpec, inputs: AttentionInputs, b: int, h: int, i: int, j: int) -> bool:
    """Whether query ``i`` of head ``h`` in batch ``b`` may attend to key ``j``. Bias is not consulted."""
    _, hq, sq, _ = inputs.q.shape
    sk = inputs.k.shape[2]
    if spec.alignment == "bottom_right_valid":
        # "the diagonal at the end of each row's valid lengths": a missing length is the tensor's.
        q_valid = sq if inputs.q_lengths is None else inputs.q_lengths[b]
        kv_valid = sk if inputs.kv_lengths is None else inputs.kv_lengths[b]
        d = diag(spec, i, q_valid, kv_valid)
    else:
        d = diag(spec, i, sq, sk)
    if spec.causal and not j <= d:
        return False
    if spec.chunk is not None:
        # "chunks tile the key axis from key 0 ... query i belongs to the chunk of its diagonal"
        chunk_of_query = math.floor(d / spec.chunk)
        if not chunk_of_query * spec.chunk <= j < (chunk_of_query + 1) * spec.chunk:
            return False
    if spec.window is not None:
        left, right = spec.window
        if left is not None and not d - left <= j:
            return False
        if right is not None and not j <= d + right:
            return False
    if inputs.q_segment_ids is not None and inputs.q_segment_ids[b][i] != inputs.kv_segment_ids[b][j]:
        return False
    if inputs.kv_lengths is not None and j >= inputs.kv_lengths[b]:
        return False
    if inputs.q_lengths is not None and i >= inputs.q_lengths[b]:
        return False
    if inputs.mask is not None:
        full = np.broadcast_to(inputs.mask, (inputs.q.shape[0], hq, sq, sk))
        if not full[b, h, i, j]:
            return False
    return True


def visibility(spec: AttentionSpec, inputs: AttentionInputs, *, bias_masks: bool = True) -> np.ndarray:
    """[B, Hq, Sq, Sk] bool, True = may attend. With ``bias_masks`` a -inf bias also masks."""
    b_, hq, sq, _ = inputs.q.shape
    sk = inputs.k.shape[2]
    out = np.zeros((b_, hq, sq, sk), dtype=bool)
    for b in range(b_):
        for h in range(hq):
            for i in range(sq):
                for j in range(sk):
                    out[b, h, i, j] = may_attend(spec, inputs, b, h, i, j)
    if bias_masks and inputs.bias is not None:
        out &= ~np.isneginf(np.broadcast_to(inputs.bias, out.shape))
    return out

"""Which (query, key) pairs may attend: every mask kind, combined by AND.

Pure functions over index ranges so the reference can build the mask one query
chunk at a time and never hold a full [Sq, Sk] plane for long sequences.
"""

from __future__ import annotations

import numpy as np

from reference.spec import AttentionInputs, AttentionSpec


def diagonal(spec: AttentionSpec, q_len: int, kv_len: int) -> int:
    """Offset of ``diag(i) - i``: 0 for top-left alignment, ``kv_len - q_len`` otherwise (the
    tensor lengths for bottom-right; pass a row's valid lengths for bottom-right-valid)."""
    return 0 if spec.alignment == "top_left" else kv_len - q_len


def row_diagonal(spec: AttentionSpec, inputs: AttentionInputs, batch: int) -> int:
    """``diag(i) - i`` for batch row ``batch``: bottom-right-valid reads that row's valid lengths."""
    sq, sk = inputs.q.shape[2], inputs.k.shape[2]
    if spec.alignment != "bottom_right_valid":
        return diagonal(spec, sq, sk)
    q_valid = sq if inputs.q_lengths is None else int(inputs.q_lengths[batch])
    kv_valid = sk if inputs.kv_lengths is None else int(inputs.kv_lengths[batch])
    return diagonal(spec, q_valid, kv_valid)


def has_mask(spec: AttentionSpec, inputs: AttentionInputs) -> bool:
    return bool(
        spec.causal
        or spec.window is not None
        or inputs.q_segment_ids is not None
        or inputs.q_lengths is not None
        or inputs.kv_lengths is not None
        or inputs.mask is not None
    )


def visible(spec: AttentionSpec, inputs: AttentionInputs, batch: int, rows: slice) -> np.ndarray | None:
    """Boolean visibility for one batch element and a range of query rows.

    Returns an array broadcastable to ``[Hq, len(rows), Sk]`` (True = may attend),
    or ``None`` when nothing is masked at all.
    """
    if not has_mask(spec, inputs):
        return None
    _, _, sq, _ = inputs.q.shape
    sk = inputs.k.shape[2]
    i = np.arange(sq)[rows][:, None]
    j = np.arange(sk)[None, :]
    allowed = np.ones((1, i.shape[0], sk), dtype=bool)
    diag = i + row_diagonal(spec, inputs, batch)
    if spec.causal:
        allowed &= (j <= diag)[None]
    if spec.chunk is not None:  # chunks tile the key axis from key 0; a query is in its diagonal's
        allowed &= (j // spec.chunk == np.floor_divide(diag, spec.chunk))[None]
    if spec.window is not None:
        left, right = spec.window
        if left is not None:
            allowed &= (j >= diag - left)[None]
        if right is not None:
            allowed &= (j <= diag + right)[None]
    if inputs.q_segment_ids is not None:
        qs = np.asarray(inputs.q_segment_ids)[batch, rows][:, None]
        ks = np.asarray(inputs.kv_segment_ids)[batch][None, :]
        allowed &= (qs == ks)[None]
    if inputs.kv_lengths is not None:
        allowed &= (j < int(inputs.kv_lengths[batch]))[None]
    if inputs.q_lengths is not None:
        allowed &= (i < int(inputs.q_lengths[batch]))[None]
    if inputs.mask is not None:
        m = np.asarray(inputs.mask)
        m = m[min(batch, m.shape[0] - 1)]  # size-1 batch dim broadcasts
        m = m[:, rows] if m.shape[1] != 1 else m
        allowed = allowed & m
    return allowed


def full_visibility(spec: AttentionSpec, inputs: AttentionInputs) -> np.ndarray:
    """The whole [B, Hq, Sq, Sk] visibility plane. For tests and small cases only."""
    b, hq, sq, _ = inputs.q.shape
    sk = inputs.k.shape[2]
    out = np.ones((b, hq, sq, sk), dtype=bool)
    for bi in range(b):
        vis = visible(spec, inputs, bi, slice(0, sq))
        if vis is not None:
            out[bi] = np.broadcast_to(vis, (hq, sq, sk))
    return out

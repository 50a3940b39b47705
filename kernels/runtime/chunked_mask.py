"""Chunked causal attention as a boolean mask: the fallback for subjects whose API takes a full
``[Sq, Sk]`` mask but has no chunked mask of its own (``jax.nn.dot_product_attention``).

Canonical semantics (``docs/semantics.md``, "Chunked causal"): chunks of ``C`` keys tile the key
axis from key 0, and query ``i`` sees, causally, the keys of its diagonal's chunk:
``diag(i) - diag(i) % C <= j <= diag(i)``. An adapter that declares
``Capabilities.chunked_causal_alignments`` through this fallback calls ``fold_chunk`` and passes
the result as its boolean mask (True = may attend), the case's own mask ANDed in.

Written apart from ``reference/masks.py`` on purpose (a chunk's first key rather than a floor
division on both axes), so a slip in one is not repeated in the other and the suite still sees
it. NumPy only; ``standalone`` repro scripts embed ``chunk_plane`` and ``fold_chunk`` verbatim.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reference.spec import AttentionInputs, AttentionSpec


def chunk_plane(q_len: int, kv_len: int, offset: int, chunk: int):
    """[Sq, Sk] bool: query i (diagonal ``i + offset``) sees key j iff j lies between the first key
    of the diagonal's chunk and the diagonal, both inclusive. A negative diagonal sees nothing."""
    diag = np.arange(q_len)[:, None] + offset
    first = diag - np.mod(diag, chunk)  # np.mod is never negative: the chunk of a negative diagonal too
    j = np.arange(kv_len)[None, :]
    return (first <= j) & (j <= diag)


def fold_chunk(mask, q_len: int, kv_len: int, offsets, chunk: int):
    """The chunked causal plane of each batch row (``offsets``: one ``diag(i) - i`` per row, or one
    for every row) ANDed with ``mask`` (broadcastable to ``[B, H, Sq, Sk]``, or None):
    ``[B|1, H|1, Sq, Sk]`` bool."""
    planes = np.stack([chunk_plane(q_len, kv_len, int(o), chunk) for o in offsets])[:, None]
    return planes if mask is None else planes & np.asarray(mask, dtype=bool)


def diagonal_offsets(inputs: AttentionInputs, spec: AttentionSpec) -> tuple[int, ...]:
    """``diag(i) - i`` per batch row for ``spec.alignment`` (one value unless bottom_right_valid)."""
    b, _, sq, _ = inputs.q.shape
    sk = inputs.k.shape[2]
    if spec.alignment == "top_left":
        return (0,)
    if spec.alignment == "bottom_right":
        return (sk - sq,)
    q_valid = [sq] * b if inputs.q_lengths is None else [int(n) for n in inputs.q_lengths]
    kv_valid = [sk] * b if inputs.kv_lengths is None else [int(n) for n in inputs.kv_lengths]
    return tuple(kv - q for q, kv in zip(q_valid, kv_valid, strict=True))


def as_mask(inputs: AttentionInputs, spec: AttentionSpec) -> tuple[AttentionInputs, AttentionSpec]:
    """A chunked case as the same call with a boolean mask: ``spec`` without ``chunk`` (still causal)
    and ``inputs.mask`` the chunk planes ANDed with the case's mask. Other cases come back as given."""
    if spec.chunk is None:
        return inputs, spec
    _, _, sq, _ = inputs.q.shape
    mask = fold_chunk(inputs.mask, sq, inputs.k.shape[2], diagonal_offsets(inputs, spec), spec.chunk)
    return dataclasses.replace(inputs, mask=mask), dataclasses.replace(spec, chunk=None)

"""Canonical attention semantics: the one definition every subject is judged by.

The prose version of these rules lives in ``docs/semantics.md``; this module is
its executable form. Adapters translate each implementation's quirks into these
semantics; the reference (``reference.attention``) implements them in float64.

Layout (canonical, "BHSD"):
    q:    [B, Hq,  Sq, D]
    k:    [B, Hkv, Sk, D]
    v:    [B, Hkv, Sk, Dv]
    bias: broadcastable to [B, Hq, Sq, Sk]
    out:  [B, Hq,  Sq, Dv]
    lse:  [B, Hq,  Sq]      natural log of the softmax denominator
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np

Alignment = Literal["top_left", "bottom_right", "bottom_right_valid"]
ALIGNMENTS: tuple[Alignment, ...] = ("top_left", "bottom_right", "bottom_right_valid")


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """The static (hashable) part of an attention call.

    scale:     logits are ``(q . k) * scale``; ``None`` means ``1/sqrt(D)``.
    softcap:   ``c * tanh(x / c)`` applied to the scaled, biased logits; ``None`` = off.
    causal:    key ``j`` is visible from query ``i`` iff ``j <= diag(i)``.
    alignment: where ``diag(i)`` sits when Sq != Sk. ``top_left``: ``diag(i) = i``;
               ``bottom_right``: ``diag(i) = i + Sk - Sq`` (tensor lengths);
               ``bottom_right_valid``: ``diag_b(i) = i + kv_len[b] - q_len[b]``, the valid
               lengths of batch row ``b`` (the tensor lengths where none are given), as
               serving kernels place it. Used by causal and window.
    window:    ``(left, right)``, inclusive, relative to ``diag(i)``: key ``j`` is
               visible iff ``diag(i) - left <= j <= diag(i) + right``. Either side
               may be ``None`` (unbounded).
    chunk:     chunked causal attention (Llama-4 style), ``C`` keys per chunk; needs ``causal``.
               Chunks tile the key axis from key 0 (``[0, C)``, ``[C, 2C)``, ...); query ``i``
               belongs to the chunk of its diagonal, so key ``j`` is visible iff ``j <= diag(i)``
               and ``j // C == diag(i) // C`` (floor division). ``None`` = plain causal.
    q_storage, kv_storage: how the call receives q and K/V when quantized, weights with scales
               (a storage name of ``kernels/contract/kv_storage_names.py``, validated by the case);
               ``None`` = plain arrays. The inputs already hold exactly the values the storage
               represents, so the math ignores them: they tell an adapter what to pass.
    batch_dims: the call's leading batch dims, e.g. ``(2, 3)``: the subject is called with q, k, v
               as ``[*batch_dims, ...]``, per-batch lengths as ``batch_dims`` and a bias or mask's
               batch axis as ``batch_dims`` (a broadcast batch axis of 1 as ones), the canonical
               batch ``B = prod(batch_dims)`` flattened row-major. A call form only: the math
               ignores it, as the storages. ``None`` = the plain ``[B, ...]`` call.
    """

    scale: float | None = None
    softcap: float | None = None
    causal: bool = False
    alignment: Alignment = "top_left"
    window: tuple[int | None, int | None] | None = None
    chunk: int | None = None
    q_storage: str | None = None
    kv_storage: str | None = None
    batch_dims: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.batch_dims is not None and (
            len(self.batch_dims) < 2
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.batch_dims)
        ):
            raise ValueError(
                f"batch_dims must be 2 or more positive sizes, e.g. (2, 3), got {self.batch_dims!r}; "
                "use None for the plain [B, ...] call"
            )
        if self.alignment not in ALIGNMENTS:
            raise ValueError(f"unknown alignment {self.alignment!r}; use one of {ALIGNMENTS}")
        if self.chunk is not None:
            if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 1:
                raise ValueError(
                    f"chunk must be a positive number of keys, got {self.chunk!r}; use None to disable it"
                )
            if not self.causal:
                raise ValueError(
                    "chunk needs causal=True (chunked causal attention); set causal=True or chunk=None"
                )
        if self.softcap is not None and not self.softcap > 0:
            raise ValueError(f"softcap must be positive, got {self.softcap}; use None to disable it")
        if self.window is not None:
            left, right = self.window
            for name, side in (("left", left), ("right", right)):
                if side is not None and side < 0:
                    raise ValueError(f"window {name} edge must be >= 0 or None, got {side}")

    def resolved_scale(self, head_dim: int) -> float:
        return 1.0 / math.sqrt(head_dim) if self.scale is None else float(self.scale)


@dataclasses.dataclass(frozen=True, eq=False)
class AttentionInputs:
    """The array part of an attention call, in canonical layout.

    q_segment_ids: [B, Sq] int; kv_segment_ids: [B, Sk] int. A query sees a key
        only if their ids are equal. Both or neither.
    q_lengths, kv_lengths: [B] int. Positions at or past a length are padding:
        padded keys are never visible; padded query rows see nothing.
    mask: bool, broadcastable to [B, Hq, Sq, Sk]; True means "may attend".
    All masks combine by AND.
    sinks: [Hq] float, one logit per query head (the same for every batch row) that
        joins the softmax denominator and attends to no value. It is used as given: not
        scaled, biased, capped or masked (docs/semantics.md, "Attention sinks").
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    bias: np.ndarray | None = None
    q_segment_ids: np.ndarray | None = None
    kv_segment_ids: np.ndarray | None = None
    q_lengths: np.ndarray | None = None
    kv_lengths: np.ndarray | None = None
    mask: np.ndarray | None = None
    sinks: np.ndarray | None = None

    @property
    def shape(self) -> AttentionShape:
        b, hq, sq, d = self.q.shape
        _, hkv, sk, dv = self.v.shape
        return AttentionShape(b, hq, hkv, sq, sk, d, dv)


@dataclasses.dataclass(frozen=True, eq=False)
class Dropout:
    """Attention dropout as one call realised it (docs/semantics.md, "Dropout").

    keep: bool, broadcastable to ``[B, Hq, Sq, Sk]``; True where a softmax weight is kept.
    rate: the probability that a weight is dropped, in ``[0, 1)``. The normalised weights are
        multiplied by ``keep / (1 - rate)`` before they meet ``v``; the softmax, its max and its
        denominator (so lse) are those of the call without dropout.
    """

    keep: np.ndarray
    rate: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"dropout rate {self.rate} is outside [0, 1); pass the drop probability")
        if np.asarray(self.keep).dtype != np.bool_ or np.ndim(self.keep) != 4:
            raise ValueError(
                f"dropout keep must be a 4-D bool array broadcastable to [B, Hq, Sq, Sk], got "
                f"{np.asarray(self.keep).dtype} of shape {np.shape(self.keep)}"
            )

    def weights(self) -> np.ndarray:
        """``keep / (1 - rate)`` in float64, the factor each normalised weight is multiplied by."""
        return np.asarray(self.keep, dtype=np.float64) / (1.0 - self.rate)


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    v_head_dim: int

    @property
    def group_size(self) -> int:
        """Query heads per kv head: query head h reads kv head ``h // group_size``."""
        return self.q_heads // self.kv_heads

    @property
    def flops(self) -> int:
        """Matmul flops of a forward pass: 2*Sq*Sk*(D + Dv) per (batch, head)."""
        return 2 * self.batch * self.q_heads * self.q_len * self.kv_len * (self.head_dim + self.v_head_dim)


def validate(inputs: AttentionInputs) -> AttentionShape:
    """Check that the inputs fit together; raise ValueError with the fix otherwise."""
    for name in ("q", "k", "v"):
        arr = getattr(inputs, name)
        if arr.ndim != 4:
            raise ValueError(f"{name} must be 4-D [B, H, S, D], got shape {arr.shape}")
    b, hq, sq, d = inputs.q.shape
    bk, hkv, sk, dk = inputs.k.shape
    bv, hv, skv, dv = inputs.v.shape
    if not (b == bk == bv):
        raise ValueError(f"batch sizes differ: q {b}, k {bk}, v {bv}; give all three the same batch")
    if hkv != hv or sk != skv:
        raise ValueError(f"k {inputs.k.shape} and v {inputs.v.shape} must share heads and length")
    if d != dk:
        raise ValueError(f"q head_dim {d} != k head_dim {dk}; q and k must share D")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"q heads {hq} is not a multiple of kv heads {hkv}; GQA needs Hq = G * Hkv")
    if min(b, hq, sq, sk, d, dv) < 1:
        raise ValueError(f"every dimension must be >= 1, got q {inputs.q.shape}, v {inputs.v.shape}")
    full = (b, hq, sq, sk)
    for name in ("bias", "mask"):
        arr = getattr(inputs, name)
        if arr is not None:
            try:
                np.broadcast_shapes(arr.shape, full)
            except ValueError:
                raise ValueError(
                    f"{name} of shape {arr.shape} does not broadcast to [B, Hq, Sq, Sk] = {full}"
                ) from None
            if arr.ndim != 4:
                raise ValueError(f"{name} must be 4-D (use size-1 dims to broadcast), got {arr.shape}")
    if (inputs.q_segment_ids is None) != (inputs.kv_segment_ids is None):
        raise ValueError("give both q_segment_ids and kv_segment_ids, or neither")
    if inputs.q_segment_ids is not None:
        if inputs.q_segment_ids.shape != (b, sq) or inputs.kv_segment_ids.shape != (b, sk):
            raise ValueError(
                f"segment ids must be [B, Sq]={(b, sq)} and [B, Sk]={(b, sk)}, got "
                f"{inputs.q_segment_ids.shape} and {inputs.kv_segment_ids.shape}"
            )
    for name, limit in (("q_lengths", sq), ("kv_lengths", sk)):
        arr = getattr(inputs, name)
        if arr is not None:
            if arr.shape != (b,):
                raise ValueError(f"{name} must be [B]={(b,)}, got {arr.shape}")
            if np.any(arr < 0) or np.any(arr > limit):
                raise ValueError(f"{name} must lie in [0, {limit}], got {arr.tolist()}")
    if inputs.sinks is not None:
        if np.shape(inputs.sinks) != (hq,):
            raise ValueError(
                f"sinks must be [Hq]={(hq,)}, one logit per query head, got {np.shape(inputs.sinks)}"
            )
        if (
            np.isnan(np.asarray(inputs.sinks, dtype=np.float64)).any()
            or np.isposinf(np.asarray(inputs.sinks, dtype=np.float64)).any()
        ):
            raise ValueError("sinks must be finite or -inf (-inf: no sink for that head); got NaN or +inf")
    if inputs.mask is not None and inputs.mask.dtype != np.bool_:
        raise ValueError(f"mask must be boolean (True = may attend), got dtype {inputs.mask.dtype}")
    return inputs.shape

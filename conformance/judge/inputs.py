"""Arrays for a case: values of each input kind, masks, and the backward cotangent.

Everything is drawn in float64 from ``np.random.default_rng([case.seed, stream])``
(one stream per tensor, so adding a bias never changes q) and then rounded to the
subject's dtype, and K/V then to its K/V storage where it declares one (``int8``:
``kernels.kv_storage``). The reference sees exactly those rounded values, up-cast.

Input kinds (only uniform [0, 1) inputs would let wrong kernels pass as mean(V)):
  * ``normal``: q ~ N(0, 2^2), k, v ~ N(0, 1): logits of std ~2, a peaked softmax.
  * ``large``: logits of std ``log(dtype max) / 2``, so the largest reach ~1.5x the
    point where ``exp`` overflows without max-subtraction. fp8 kernels hold their logits in
    float32 (``dtypes.logits_dtype``), so there it is float32's max: q ~ N(0, 44^2), which
    e4m3fn (max 448) and e5m2 still hold.
  * ``integers``: sparse small integers in [-3, 3] (60% zeros): q.k is exact in every dtype.
  * ``nan_padding``: ``normal``, then padding is overwritten: NaN in q rows that see no
    key (e.g. past ``q_lengths``), NaN in k at keys that no query of the batch row sees
    (past ``kv_lengths``, an orphan segment), and a large finite sentinel in v there
    (``padding_sentinel``). Both fp8 dtypes have a NaN.
    NaN in masked logits must never reach a valid output. v gets a finite sentinel, not
    NaN, because an exactly-zero weight times NaN is NaN in IEEE arithmetic for every
    matmul; the sentinel instead exposes any nonzero weight on a padded key.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from conformance.judge import dtypes
from conformance.plan.cases import Case
from kernels import kv_storage
from reference.masks import full_visibility
from reference.spec import AttentionInputs

# Stream tags for np.random.default_rng([seed, tag]): fixed forever, or old repros change.
_Q, _K, _V, _BIAS, _SEG, _MASK, _DOUT, _FRESH, _SINKS = range(9)
STREAMS = {
    "q": _Q,
    "k": _K,
    "v": _V,
    "bias": _BIAS,
    "segment_ids": _SEG,
    "mask": _MASK,
    "dout": _DOUT,
    "sinks": _SINKS,
}


@dataclasses.dataclass(frozen=True, eq=False)
class MaskArrays:
    """q_segment_ids [B, Sq], kv_segment_ids [B, Sk], q_lengths [B], kv_lengths [B],
    mask bool broadcastable to [B, Hq, Sq, Sk]; each None when the case has none."""

    q_segment_ids: np.ndarray | None
    kv_segment_ids: np.ndarray | None
    q_lengths: np.ndarray | None
    kv_lengths: np.ndarray | None
    mask: np.ndarray | None


# --- pure draws -----------------------------------------------------------------------
# Plain NumPy over plain numbers: a standalone repro script (conformance/judge/standalone.py)
# embeds their source, so it regenerates bit-identical inputs without this checkout.


def draw_values(seed: int, stream: int, salt: int, shape: tuple[int, ...], std: float, integers: bool):
    """float64 values of one tensor: N(0, std^2), or sparse integers in [-3, 3] (60% zeros)."""
    rng = np.random.default_rng([seed, stream, salt])
    if integers:
        ints = rng.integers(-3, 4, size=shape).astype(np.float64)
        return np.where(rng.random(shape) < 0.6, 0.0, ints)
    return std * rng.standard_normal(shape)


def segment_runs(rng, length: int, runs: int, first_id: int):
    """[length] int32 ids: ``runs`` contiguous runs (as many as fit) with ids first_id, first_id+1, ..."""
    runs = max(1, min(runs, length))
    cuts = np.sort(rng.choice(np.arange(1, length), size=runs - 1, replace=False)) if runs > 1 else []
    ids = np.zeros(length, dtype=np.int32)
    for cut in cuts:
        ids[cut:] += 1
    return ids + first_id


def draw_segment_ids(seed: int, stream: int, batch: int, q_len: int, kv_len: int, runs: int, kv_first: int):
    """(q ids [B, Sq], kv ids [B, Sk]) int32; kv_first = 1 makes q's first run an orphan (sees no key)."""
    rng = np.random.default_rng([seed, stream, 0])
    q_ids = np.stack([segment_runs(rng, q_len, runs, 0) for _ in range(batch)])
    kv_ids = np.stack([segment_runs(rng, kv_len, runs, kv_first) for _ in range(batch)])
    return q_ids, kv_ids


def draw_sinks(
    seed: int, stream: int, salt: int, q_heads: int, kv_len: int, extreme: bool, vanishing: float = -1e4
):
    """[Hq] float64 sink logits: N(log(Sk) + 2, 2^2), near the lse of a row of N(0, 2^2) logits
    over Sk keys, so the sink takes a real share of it. ``extreme``: heads 0, 1, 2, 3, ... get
    +30, ``vanishing`` (-1e4), the draw, +30, ...: a sink that dominates every row's denominator,
    and one that vanishes from it (its exp underflows to 0 in float32 too; a row that sees no
    key has exactly it as lse)."""
    rng = np.random.default_rng([seed, stream, salt])
    sinks = np.log(kv_len) + 2.0 + 2.0 * rng.standard_normal(q_heads)
    if extreme:
        for h in range(q_heads):
            if h % 3 < 2:
                sinks[h] = (30.0, vanishing)[h % 3]
    return sinks


def vanishing_sink(dtype: str) -> float:
    """The logit of a sink that vanishes from the denominator: -1e4, or the dtype's most negative
    finite value where -1e4 is out of its range (e4m3fn: -448, a NaN otherwise). exp of either,
    next to any logit a case draws, underflows to 0 in float32."""
    return -min(1e4, dtypes.max_value(dtype))


def draw_mask(seed: int, stream: int, shape: tuple[int, ...]):
    """A boolean mask of ``shape``, True (may attend) with probability 0.8."""
    return np.random.default_rng([seed, stream, 0]).random(shape) < 0.8


def dead_positions(visible, kv_heads: int):
    """(dead_rows [B, Hq, Sq], dead_keys [B, Hkv, Sk]) of a visibility plane [B, Hq, Sq, Sk]: query
    rows that see no key, and keys that no query of the batch row (any head of the group) sees."""
    b, hq, _, sk = visible.shape
    seen = visible.any(axis=2).reshape(b, kv_heads, hq // kv_heads, sk)
    return ~visible.any(axis=3), ~seen.any(axis=2)


def draw_dout(seed: int, stream: int, shape: tuple[int, ...], fully_masked):
    """The cotangent [B, Hq, Sq, Dv] in float64, N(0, 1), zero on fully masked rows [B, Hq, Sq]."""
    dout = np.random.default_rng([seed, stream, 0]).standard_normal(shape)
    dout[np.broadcast_to(fully_masked, shape[:3])] = 0.0
    return dout


# --------------------------------------------------------------------------------------


def mask_arrays(case: Case) -> MaskArrays:
    """The case's masks. Cheap (no float data), so case generation can use it too."""
    q_seg = kv_seg = None
    if case.segments:
        # An orphan segment: q ids run 0..n-1 and kv ids 1..n, so q's first run sees no key.
        kv_first = 1 if case.orphan_segment else 0
        q_seg, kv_seg = draw_segment_ids(
            case.seed, _SEG, case.batch, case.q_len, case.kv_len, case.segments, kv_first
        )
    mask = None
    if case.mask is not None:
        mask = draw_mask(case.seed, _MASK, case.mask_shape)
    return MaskArrays(
        q_segment_ids=q_seg,
        kv_segment_ids=kv_seg,
        q_lengths=None if case.q_lengths is None else np.asarray(case.q_lengths, dtype=np.int32),
        kv_lengths=None if case.kv_lengths is None else np.asarray(case.kv_lengths, dtype=np.int32),
        mask=mask,
    )


def _values(case: Case, stream: int, shape: tuple[int, ...], std: float, salt: int) -> np.ndarray:
    return draw_values(case.seed, stream, salt, shape, std, case.input_kind == "integers")


def q_std(case: Case) -> float:
    """Std of q so that the logits ``scale * q.k`` (k ~ N(0, 1)) have the kind's std."""
    if case.input_kind == "large":
        logit_std = dtypes.exp_overflow(dtypes.logits_dtype(case.dtype)) / 2
    else:
        logit_std = 2.0
    scale = case.spec.resolved_scale(case.head_dim)
    # Within the dtype's range (8 std under its max): a tiny scale must not turn q into inf or,
    # in e4m3fn, NaN. Only fp8 ever comes near (e4m3fn: 56; the logits are then smaller).
    return min(logit_std / (scale * math.sqrt(case.head_dim)), dtypes.max_value(case.dtype) / 8)


def padding(case: Case, masks: MaskArrays) -> tuple[np.ndarray, np.ndarray]:
    """(dead_rows [B, Hq, Sq], dead_keys [B, Hkv, Sk]): query rows that see no key, and keys
    that no query of the same batch row (in any head of its group) sees."""
    skeleton = dataclasses.replace(
        case.skeleton(),
        q_segment_ids=masks.q_segment_ids,
        kv_segment_ids=masks.kv_segment_ids,
        mask=masks.mask,
    )
    return dead_positions(full_visibility(case.spec, skeleton), case.kv_heads)


def padding_sentinel(case: Case) -> float:
    """The finite value written into v past ``kv_lengths``: huge, yet ``Sk`` of them
    summed with weights <= 1 stay finite in the dtype. fp8 values are summed in float32 (its
    matmuls accumulate there), so there only ``sqrt(max)`` bounds it: e4m3fn 21 (then 20 once
    rounded), e5m2 240, against |v| ~ 1; ``max / (4 Sk)`` would be below 1 in e4m3fn."""
    top = dtypes.max_value(case.dtype)
    if dtypes.is_fp8(case.dtype):
        return float(math.sqrt(top))
    return float(min(math.sqrt(top), top / (4 * case.kv_len)))


def build_inputs(case: Case, salt: int = 0) -> AttentionInputs:
    """The case's inputs, every float array already in the subject's dtype (K/V also in its
    K/V storage, ``case.kv_storage``).

    ``salt`` != 0 gives fresh values with the same shapes and masks (used by the
    recompilation and determinism checks).
    q: [B, Hq, Sq, D]; k: [B, Hkv, Sk, D]; v: [B, Hkv, Sk, Dv]; bias: case.bias_shape;
    sinks: [Hq].
    """
    b = case.batch
    q = _values(case, _Q, (b, case.q_heads, case.q_len, case.head_dim), q_std(case), salt)
    k = _values(case, _K, (b, case.kv_heads, case.kv_len, case.head_dim), 1.0, salt)
    v = _values(case, _V, (b, case.kv_heads, case.kv_len, case.v_head_dim), 1.0, salt)
    bias = None if case.bias is None else _values(case, _BIAS, case.bias_shape, 1.0, salt)
    sinks = None
    if case.sinks is not None:
        extreme, vanishing = case.sinks == "extreme", vanishing_sink(case.dtype)
        sinks = draw_sinks(case.seed, _SINKS, salt, case.q_heads, case.kv_len, extreme, vanishing)
    masks = mask_arrays(case)
    if case.input_kind == "nan_padding":
        dead_rows, dead_keys = padding(case, masks)
        q[dead_rows] = np.nan
        k[dead_keys] = np.nan
        v[dead_keys] = padding_sentinel(case)
    cast = lambda x: None if x is None else dtypes.cast(x, case.dtype)  # noqa: E731
    stored = lambda x: kv_storage.represent(cast(x), case.kv_storage)  # noqa: E731
    return AttentionInputs(
        q=cast(q),
        k=stored(k),
        v=stored(v),
        bias=cast(bias),
        sinks=cast(sinks),
        q_segment_ids=masks.q_segment_ids,
        kv_segment_ids=masks.kv_segment_ids,
        q_lengths=masks.q_lengths,
        kv_lengths=masks.kv_lengths,
        mask=masks.mask,
    )


def build_dout(case: Case, fully_masked: np.ndarray) -> np.ndarray:
    """The cotangent ``dout: [B, Hq, Sq, Dv]`` in the subject's dtype, N(0, 1), and zero on
    fully masked rows: their forward value is each subject's own convention
    (docs/semantics.md), so a gradient through them would compare conventions, not math."""
    shape = (case.batch, case.q_heads, case.q_len, case.v_head_dim)
    return dtypes.cast(draw_dout(case.seed, _DOUT, shape, fully_masked), case.dtype)

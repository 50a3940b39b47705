"""Arrays for a case: values of each input kind, masks, and the backward cotangent.

Everything is drawn in float64 from ``np.random.default_rng([case.seed, stream])``
(one stream per tensor, so adding a bias never changes q: ``conformance/plan/draws.py``)
and then rounded to the subject's dtype, and q and K/V then to their storages where the case
names one (``int8``, ``float8_e4m3fn_per_head``, ...: ``kernels.runtime.kv_storage``). The reference
sees exactly those rounded values, up-cast.

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
from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.judge import dtypes
from conformance.plan import draws
from conformance.plan.cases import Case
from conformance.plan.draws import (
    STREAMS,
    MaskArrays,
    dead_positions,
    draw_dout,
    draw_sinks,
    draw_values,
    mask_arrays,
)
from kernels.contract import features
from kernels.runtime import kv_storage
from reference.masks import full_visibility
from reference.spec import AttentionInputs


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


def vanishing_sink(dtype: str) -> float:
    """The logit of a sink that vanishes from the denominator: -1e4, or the dtype's most negative
    finite value where -1e4 is out of its range (e4m3fn: -448, a NaN otherwise). exp of either,
    next to any logit a case draws, underflows to 0 in float32."""
    return -min(1e4, dtypes.max_value(dtype))


def bias_fill_value(case: Case) -> float:
    """The number the case's bias fill writes, in float64 (``features.fill_value``): -inf, -1e9 or
    the dtype's most negative finite number, so it survives the cast to the dtype unchanged."""
    return features.fill_value(case.bias_fill_value, float(dtypes.max_value(case.dtype)))


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
    """The case's inputs, every float array already in the subject's dtype (q and K/V also in
    their storages, ``case.q_storage`` and ``case.kv_storage``: the values the quantized form holds).

    ``salt`` != 0 gives fresh values with the same shapes and masks (used by the
    recompilation and determinism checks).
    q: [B, Hq, Sq, D]; k: [B, Hkv, Sk, D]; v: [B, Hkv, Sk, Dv]; bias: case.bias_shape;
    sinks: [Hq].
    """
    b = case.batch
    q = _values(case, STREAMS["q"], (b, case.q_heads, case.q_len, case.head_dim), q_std(case), salt)
    k = _values(case, STREAMS["k"], (b, case.kv_heads, case.kv_len, case.head_dim), 1.0, salt)
    v = _values(case, STREAMS["v"], (b, case.kv_heads, case.kv_len, case.v_head_dim), 1.0, salt)
    bias = None if case.bias is None else _values(case, STREAMS["bias"], case.bias_shape, 1.0, salt)
    fill = draws.bias_fill_positions(case)
    if fill is not None:
        bias[fill] = bias_fill_value(case)
    sinks = None
    if case.sinks is not None:
        extreme, vanishing = case.sinks == "extreme", vanishing_sink(case.dtype)
        sinks = draw_sinks(case.seed, STREAMS["sinks"], salt, case.q_heads, case.kv_len, extreme, vanishing)
    masks = mask_arrays(case)
    if case.input_kind == "nan_padding":
        dead_rows, dead_keys = padding(case, masks)
        q[dead_rows] = np.nan
        k[dead_keys] = np.nan
        v[dead_keys] = padding_sentinel(case)
    cast = lambda x: None if x is None else dtypes.cast(x, case.dtype)  # noqa: E731
    stored = lambda x: kv_storage.represent(cast(x), case.kv_storage)  # noqa: E731
    return AttentionInputs(
        q=kv_storage.represent(cast(q), case.q_storage),
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


# The arrays of every case with a leading batch axis; the features add theirs (``batch_inputs``).
BATCH_INPUTS = ("q", "k", "v", *features.batch_inputs())


def request_inputs(case: Case, inputs: AttentionInputs, b: int) -> AttentionInputs:
    """``inputs`` of ``case`` cut to request ``b`` (``Case.request(b)``'s inputs): every array with a
    batch axis sliced to ``[b:b+1]``, a broadcast (size-1) batch axis and arrays without one
    (sinks ``[Hq]``) kept. The values are the batch's own bits: nothing is drawn again."""

    def cut(name: str) -> np.ndarray | None:
        array = getattr(inputs, name)
        if array is None or name not in BATCH_INPUTS or array.shape[0] == 1:
            return array
        if array.shape[0] != case.batch:
            raise ValueError(f"{name} has {array.shape[0]} rows, not the case's batch {case.batch}")
        return array[b : b + 1]

    return dataclasses.replace(inputs, **{f.name: cut(f.name) for f in dataclasses.fields(inputs)})


def build_dout(case: Case, fully_masked: np.ndarray) -> np.ndarray:
    """The cotangent ``dout: [B, Hq, Sq, Dv]`` in the subject's dtype, N(0, 1), and zero on
    fully masked rows: their forward value is each subject's own convention
    (docs/semantics.md), so a gradient through them would compare conventions, not math."""
    shape = (case.batch, case.q_heads, case.q_len, case.v_head_dim)
    return dtypes.cast(draw_dout(case.seed, STREAMS["dout"], shape, fully_masked), case.dtype)


# The float input arrays a repro script casts to the subject's dtype and digests, as the suite
# built them (the others are ids, lengths and booleans).
FLOAT_INPUTS = ("q", "k", "v", "bias", "sinks")


def script_draws(case: Case, backward: bool) -> tuple[list[Callable[..., Any]], str]:
    """For a standalone repro (``conformance/judge/standalone.py``): the draw functions to embed
    and the statements that draw every input array of the case, as ``build_inputs`` does."""
    stream, integers = draws.STREAMS, case.input_kind == "integers"
    functions: list[Callable[..., Any]] = [draws.draw_values]
    lines = [
        f"q = draw_values(SEED, {stream['q']}, 0, (B, HQ, SQ, D), {q_std(case)!r}, {integers})",
        f"k = draw_values(SEED, {stream['k']}, 0, (B, HKV, SK, D), 1.0, {integers})",
        f"v = draw_values(SEED, {stream['v']}, 0, (B, HKV, SK, DV), 1.0, {integers})",
    ]
    if case.bias is not None:
        shape = case.bias_shape
        lines.append(
            f"bias = draw_values(SEED, {stream['bias']}, 0, {shape}, 1.0, {integers})  # [B, Hq, Sq, Sk]"
        )
        if case.bias_fill is not None:
            functions.append(draws.draw_bias_fill)
            lines.append(
                f"bias[draw_bias_fill(SEED, {stream['bias_fill']}, {shape}, {case.bias_fill!r}, "
                f"{case.bias_fill_block}, SK)] = float('{bias_fill_value(case)!r}')  # the bias fill"
            )
    else:
        lines.append("bias = None")
    if case.sinks is not None:
        functions.append(draws.draw_sinks)
        vanishing = vanishing_sink(case.dtype)  # passed where not the default (-1e4): e4m3fn
        extra = "" if vanishing == -1e4 else f", {vanishing!r}"
        lines.append(
            f"sinks = draw_sinks(SEED, {stream['sinks']}, 0, HQ, SK, {case.sinks == 'extreme'}{extra})"
            f"  # [Hq] one logit per query head ({case.sinks})"
        )
    else:
        lines.append("sinks = None")
    if case.segments:
        functions += [draws.segment_runs, draws.draw_segment_ids]
        kv_first = 1 if case.orphan_segment else 0
        note = "  # q's first run has an id no key has" if case.orphan_segment else ""
        lines.append(
            f"q_segment_ids, kv_segment_ids = draw_segment_ids(SEED, {stream['segment_ids']}, B, SQ, SK, "
            f"{case.segments}, {kv_first}){note}"
        )
    else:
        lines.append("q_segment_ids = kv_segment_ids = None")
    if case.mask is not None:
        functions.append(draws.draw_mask)
        lines.append(f"mask = draw_mask(SEED, {stream['mask']}, {case.mask_shape})  # True = may attend")
    else:
        lines.append("mask = None")
    for name in ("q_lengths", "kv_lengths"):
        value = getattr(case, name)
        lines.append(
            f"{name} = None" if value is None else f"{name} = np.array({list(value)}, dtype=np.int32)"
        )
    if backward:
        functions.append(draws.draw_dout)
    return functions, "\n".join(lines) + "\n"

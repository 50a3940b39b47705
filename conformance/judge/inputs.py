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
from conformance.plan import draws, recipes
from conformance.plan.cases import Case
from conformance.plan.draws import STREAMS, MaskArrays, dead_positions, draw_dout, draw_sinks, draw_values
from conformance.plan.recipes import DV, HKV, HQ, SALT, SEED, SK, SQ, B, Call, D, Fill, Name, Of, Recipe
from kernels.contract import features
from kernels.runtime import kv_storage
from reference.masks import full_visibility
from reference.spec import AttentionInputs


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


# Every input array of a case, in the order a script draws them: the draw and its arguments, read
# by both ``build_inputs`` and ``script_draws``. Rounding to the dtype and storages, and the NaN
# of ``nan_padding``, come after (``build_inputs``; ``standalone._padding_lines``).
INTEGERS = Of(lambda case: case.input_kind == "integers")
RECIPES: tuple[Recipe, ...] = (
    Recipe(
        ("q",), "float", Call(draw_values, (SEED, STREAMS["q"], SALT, (B, HQ, SQ, D), Of(q_std), INTEGERS))
    ),
    Recipe(("k",), "float", Call(draw_values, (SEED, STREAMS["k"], SALT, (B, HKV, SK, D), 1.0, INTEGERS))),
    Recipe(("v",), "float", Call(draw_values, (SEED, STREAMS["v"], SALT, (B, HKV, SK, DV), 1.0, INTEGERS))),
    Recipe(
        ("bias",),
        "float",
        Call(draw_values, (SEED, STREAMS["bias"], SALT, Of(lambda case: case.bias_shape), 1.0, INTEGERS)),
        when=lambda case: case.bias is not None,
        fill=Fill(
            draws.BIAS_FILL_AT, Of(bias_fill_value), lambda case: case.bias_fill is not None, "the bias fill"
        ),
        note="[B, Hq, Sq, Sk]",
    ),
    Recipe(
        ("sinks",),
        "float",
        Call(
            draw_sinks,
            (
                SEED,
                STREAMS["sinks"],
                SALT,
                HQ,
                SK,
                Of(lambda case: case.sinks == "extreme"),
                Of(lambda case: vanishing_sink(case.dtype)),
            ),
        ),
        when=lambda case: case.sinks is not None,
        note=lambda case: f"[Hq] one logit per query head ({case.sinks})",
    ),
    *draws.MASK_RECIPES,
)
# The backward cotangent, zero on fully masked rows (a script passes ``~valid``).
DOUT = Recipe(
    ("dout",),
    "float",
    Call(draw_dout, (SEED, STREAMS["dout"], (B, HQ, SQ, DV), Name("fully_masked", "~valid"))),
)
# The float input arrays, cast to the subject's dtype; a repro script digests them, as the suite
# built them (the others are ids, lengths and booleans).
FLOAT_INPUTS = tuple(name for r in RECIPES if r.kind == "float" for name in r.names)


def _check_recipes() -> None:
    """Fail at import, naming the gap, unless the recipes draw each array of a call exactly once."""
    drawn = [name for r in RECIPES for name in r.names]
    wanted = [f.name for f in dataclasses.fields(AttentionInputs)]
    if sorted(drawn) != sorted(wanted):
        raise ValueError(f"the input recipes draw {drawn}, but a call's arrays are {wanted}")


_check_recipes()


def build_inputs(case: Case, salt: int = 0) -> AttentionInputs:
    """The case's inputs, every float array already in the subject's dtype (q and K/V also in
    their storages, ``case.q_storage`` and ``case.kv_storage``: the values the quantized form holds).

    ``salt`` != 0 gives fresh values with the same shapes and masks (used by the
    recompilation and determinism checks).
    q: [B, Hq, Sq, D]; k: [B, Hkv, Sk, D]; v: [B, Hkv, Sk, Dv]; bias: case.bias_shape;
    sinks: [Hq].
    """
    values = recipes.case_values(case, salt)
    arrays = {name: a for r in RECIPES for name, a in recipes.build(r, case, values).items()}
    if case.input_kind == "nan_padding":
        masks = MaskArrays(**{f.name: arrays[f.name] for f in dataclasses.fields(MaskArrays)})
        dead_rows, dead_keys = padding(case, masks)
        arrays["q"][dead_rows] = np.nan
        arrays["k"][dead_keys] = np.nan
        arrays["v"][dead_keys] = padding_sentinel(case)
    for name in FLOAT_INPUTS:
        if arrays[name] is not None:
            arrays[name] = dtypes.cast(arrays[name], case.dtype)
    arrays["q"] = kv_storage.represent(arrays["q"], case.q_storage)
    for name in ("k", "v"):
        arrays[name] = kv_storage.represent(arrays[name], case.kv_storage)
    return AttentionInputs(**arrays)


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
    values = recipes.case_values(case) | {"fully_masked": fully_masked}
    return dtypes.cast(recipes.run(DOUT.call, case, values), case.dtype)


def script_draws(case: Case, backward: bool) -> tuple[list[Callable[..., Any]], str]:
    """For a standalone repro (``conformance/judge/standalone.py``): the draw functions to embed
    and the statements that draw every input array of the case: ``RECIPES``, as ``build_inputs``
    evaluates them (``backward``: the cotangent's draw too; its statement is the script's)."""
    functions = [f for r in (*RECIPES, *((DOUT,) if backward else ())) for f in recipes.functions(r, case)]
    lines = [line for r in RECIPES for line in recipes.statements(r, case)]
    return list(dict.fromkeys(functions)), "\n".join(lines) + "\n"

"""A case's arrays as pure draws from its seed: q, k, v, bias, sinks, segment ids, the
boolean mask and the backward cotangent, each in float64 (or int/bool) from
``np.random.default_rng([case.seed, stream, salt])``, one stream per tensor, so adding a
bias never changes q.

Which draw makes which array, with which arguments, is a recipe (``conformance/plan/recipes.py``):
the masks' here (``MASK_RECIPES``), the float inputs' in ``conformance/judge/inputs.py``. The
planner needs a case's masks to find rows that see no key (``mask_arrays``); the judge
rounds the values to the subject's dtype (``conformance/judge/inputs.py``); a standalone
repro script embeds the draws' source and renders the same recipes (``conformance/judge/standalone.py``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from conformance.plan.cases import Case
from conformance.plan.recipes import SEED, SK, SQ, B, Call, Of, Recipe, build, case_values, run

# Stream tags for np.random.default_rng([seed, tag]): fixed forever, or old repros change.
_Q, _K, _V, _BIAS, _SEG, _MASK, _DOUT, _FRESH, _SINKS, _BIAS_FILL = range(10)
STREAMS = {
    "q": _Q,
    "k": _K,
    "v": _V,
    "bias": _BIAS,
    "segment_ids": _SEG,
    "mask": _MASK,
    "dout": _DOUT,
    "sinks": _SINKS,
    "bias_fill": _BIAS_FILL,
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


def draw_mask(seed: int, stream: int, shape: tuple[int, ...]):
    """A boolean mask of ``shape``, True (may attend) with probability 0.8."""
    return np.random.default_rng([seed, stream, 0]).random(shape) < 0.8


def draw_bias_fill(seed: int, stream: int, shape: tuple[int, ...], place: str, block: int, kv_len: int):
    """Where a bias fill goes (``kernels/contract/features.py``: ``BIAS_FILL``): a bool array of the bias's
    ``shape`` ([B|1, Hq|1, Sq|1, Sk|1]). ``first_block``: keys [0, block); ``last_block``: the last
    block of keys, [block * ((Sk - 1) // block), Sk); ``row``: query row Sq // 2 (every row where the
    bias has no query axis); ``scattered``: each entry with probability 1/4. A kv axis of size 1
    (broadcast) is covered whole by the block places."""
    fill = np.zeros(shape, dtype=bool)
    if place == "first_block":
        fill[..., :block] = True
    elif place == "last_block":
        fill[..., (block * ((kv_len - 1) // block) if shape[-1] > 1 else 0) :] = True
    elif place == "row":
        fill[:, :, shape[2] // 2, :] = True
    else:
        fill = np.random.default_rng([seed, stream, 0]).random(shape) < 0.25
    return fill


def _fill_block(case: Case) -> int:
    if case.bias_fill.endswith("_block") and case.bias_fill_block < 1:
        raise ValueError(
            f"{case.case_id}: bias_fill_block is 0, never set to a subject's kv block "
            "(features.for_subject resolves a template's)"
        )
    return case.bias_fill_block


# Where a case's bias fill goes: the judge's bias recipe writes its value there.
BIAS_FILL_AT = Call(
    draw_bias_fill,
    (
        SEED,
        _BIAS_FILL,
        Of(lambda case: case.bias_shape),
        Of(lambda case: case.bias_fill),
        Of(_fill_block),
        SK,
    ),
)


def bias_fill_positions(case: Case):
    """The case's bias fill positions (``draw_bias_fill``), or None without a fill."""
    if case.bias_fill is None:
        return None
    return run(BIAS_FILL_AT, case, case_values(case))


def neg_inf_bias(case: Case):
    """Where the case's bias is -inf (a mask, docs/semantics.md), or None where it is nowhere."""
    return bias_fill_positions(case) if case.bias_fill_value == "-inf" else None


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


def int32_lengths(lengths: tuple[int, ...]):
    """[B] int32 valid lengths: the case's own numbers (nothing is drawn)."""
    return np.asarray(lengths, dtype=np.int32)


# --------------------------------------------------------------------------------------

# The masks' recipes. An orphan segment: q ids run 0..n-1 and kv ids 1..n, so q's first run sees no key.
MASK_RECIPES: tuple[Recipe, ...] = (
    Recipe(
        ("q_segment_ids", "kv_segment_ids"),
        "int",
        Call(
            draw_segment_ids,
            (
                SEED,
                _SEG,
                B,
                SQ,
                SK,
                Of(lambda case: case.segments),
                Of(lambda case: 1 if case.orphan_segment else 0),
            ),
        ),
        when=lambda case: case.segments > 0,
        helpers=(segment_runs,),
        note=lambda case: "q's first run has an id no key has" if case.orphan_segment else "",
    ),
    Recipe(
        ("mask",),
        "bool",
        Call(draw_mask, (SEED, _MASK, Of(lambda case: case.mask_shape))),
        when=lambda case: case.mask is not None,
        note="True = may attend",
    ),
    *(
        Recipe(
            (name,),
            "int",
            Call(int32_lengths, (Of(lambda case, name=name: getattr(case, name)),)),
            when=lambda case, name=name: getattr(case, name) is not None,
        )
        for name in ("q_lengths", "kv_lengths")
    ),
)


def mask_arrays(case: Case) -> MaskArrays:
    """The case's masks. Cheap (no float data), so case generation can use it too."""
    values = case_values(case)
    return MaskArrays(**{name: a for r in MASK_RECIPES for name, a in build(r, case, values).items()})

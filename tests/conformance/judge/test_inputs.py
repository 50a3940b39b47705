"""Meta-tests of input generation: dtypes, kinds, masks and padding."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from conformance.judge import dtypes
from conformance.judge.inputs import DOUT, FLOAT_INPUTS, build_dout, build_inputs, padding, script_draws
from conformance.plan import recipes
from conformance.plan.cases import Case
from conformance.plan.draws import mask_arrays
from reference import attention_forward


@pytest.mark.parametrize("dtype", dtypes.DTYPE_NAMES)
def test_inputs_are_in_the_subject_dtype_and_deterministic(dtype):
    case = Case(
        "x", dtype, batch=2, q_heads=4, kv_heads=2, q_len=16, kv_len=24, head_dim=8, v_head_dim=4, bias="1h1k"
    )
    a, b = build_inputs(case), build_inputs(case)
    for name in ("q", "k", "v", "bias"):
        assert dtypes.name_of(getattr(a, name).dtype) == dtype
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes()
    assert a.q.shape == (2, 4, 16, 8) and a.v.shape == (2, 2, 24, 4) and a.bias.shape == (1, 4, 1, 24)


def test_batches_get_different_data_and_salt_gives_fresh_values():
    case = Case("x", "float32", batch=2, q_len=8, kv_len=8, head_dim=4, v_head_dim=4)
    inputs = build_inputs(case)
    assert not np.array_equal(inputs.q[0], inputs.q[1])
    fresh = build_inputs(case, salt=1)
    assert fresh.q.shape == inputs.q.shape and not np.array_equal(fresh.q, inputs.q)


def test_large_kind_reaches_past_exp_overflow():
    for dtype in ("float16", "bfloat16", "float32"):
        case = Case("x", dtype, input_kind="large", q_len=64, kv_len=64)
        inputs = build_inputs(case)
        logits = np.einsum("bhqd,bhkd->bhqk", inputs.q.astype(np.float64), inputs.k.astype(np.float64))
        logits *= case.spec.resolved_scale(case.head_dim)
        assert np.abs(logits).max() > dtypes.exp_overflow(dtype)
        assert np.isfinite(attention_forward(inputs, case.spec).out).all()


def test_integer_kind_is_sparse_small_integers():
    inputs = build_inputs(Case("x", "bfloat16", input_kind="integers"))
    q = inputs.q.astype(np.float64)
    assert np.array_equal(q, np.round(q)) and np.abs(q).max() <= 3
    assert 0.4 < (q == 0).mean() < 0.8


def test_nan_padding_only_touches_padding_and_the_reference_stays_finite_on_valid_rows():
    case = Case(
        "x",
        "float32",
        batch=2,
        q_len=32,
        kv_len=48,
        q_lengths=(20, 3),
        kv_lengths=(40, 5),
        input_kind="nan_padding",
    )
    inputs = build_inputs(case)
    assert np.isnan(inputs.q[0, :, 20:]).all() and not np.isnan(inputs.q[0, :, :20]).any()
    assert np.isnan(inputs.q[1, :, 3:]).all()
    assert np.isnan(inputs.k[1, :, 5:]).all() and not np.isnan(inputs.k[1, :, :5]).any()
    assert not np.isnan(inputs.v).any() and inputs.v[0, 0, 45, 0] > 1e6
    ref = attention_forward(inputs, case.spec)
    assert np.isfinite(ref.out[~ref.fully_masked]).all()


def test_orphan_segments_make_fully_masked_rows_and_dead_keys():
    case = Case("x", "float32", batch=2, q_len=64, kv_len=64, segments=3, orphan_segment=True)
    masks = mask_arrays(case)
    dead_rows, dead_keys = padding(case, masks)
    assert dead_rows.any() and dead_keys.any()
    assert set(np.unique(masks.q_segment_ids)) == {0, 1, 2}
    assert set(np.unique(masks.kv_segment_ids)) == {1, 2, 3}


def test_dout_is_zero_on_fully_masked_rows():
    case = Case("x", "float32", batch=2, q_len=16, kv_len=16, q_lengths=(10, 16))
    ref = attention_forward(build_inputs(case), case.spec)
    dout = build_dout(case, ref.fully_masked)
    assert (dout[0, :, 10:] == 0).all() and (dout[0, :, :10] != 0).any()


# Cases that between them take every recipe and post-step: a bias with a -inf and a finite fill,
# extreme sinks with e4m3fn's own vanishing sink (an argument a script writes only off its
# default), orphan segments, a mask, both lengths, integers and the backward cotangent.
SCRIPTED = {
    "every_array": Case(
        "x",
        "float32",
        batch=2,
        q_heads=4,
        kv_heads=2,
        q_len=24,
        kv_len=40,
        head_dim=8,
        v_head_dim=4,
        bias="1h1k",
        bias_fill="first_block",
        bias_fill_block=16,
        sinks="extreme",
        segments=3,
        orphan_segment=True,
        mask="b1qk",
        q_lengths=(20, 3),
        kv_lengths=(40, 5),
    ),
    "finite_fill_integers": Case(
        "x", "bfloat16", bias="bhqk", bias_fill="scattered", bias_fill_value="min", input_kind="integers"
    ),
    "e4m3fn_sinks": Case("x", "float8_e4m3fn", sinks="extreme", q_heads=3, kv_heads=1),
    "plain": Case("x", "float16"),
}


@pytest.mark.parametrize("case", SCRIPTED.values(), ids=list(SCRIPTED))
def test_a_script_draws_what_build_inputs_draws(case):
    """The statements a repro script runs (``script_draws``: the recipes rendered) give the arrays
    ``build_inputs`` builds (the recipes evaluated), array by array, and the same cotangent."""
    functions, text = script_draws(case, backward=True)
    namespace = {"np": np, **recipes.case_values(case)}
    exec("".join(inspect.getsource(f) + "\n" for f in functions), namespace)
    exec(text, namespace)
    built = build_inputs(case)
    for name in (f.name for f in dataclasses.fields(built)):
        want, got = getattr(built, name), namespace[name]
        if name in FLOAT_INPUTS and got is not None:
            got = dtypes.cast(got, case.dtype)
        assert (got is None) == (want is None), name
        if want is not None:
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name
    fully_masked = np.zeros((case.batch, case.q_heads, case.q_len), dtype=bool)
    fully_masked[..., ::3] = True
    namespace["valid"] = ~fully_masked
    dout = eval(recipes.call_text(DOUT.call, case), namespace)
    assert dtypes.cast(dout, case.dtype).tobytes() == build_dout(case, fully_masked).tobytes()


def test_a_script_leaves_out_only_arguments_at_their_defaults():
    assert "draw_sinks(SEED, 8, 0, HQ, SK, True)" in script_draws(SCRIPTED["every_array"], False)[1]
    assert "draw_sinks(SEED, 8, 0, HQ, SK, True, -448.0)" in script_draws(SCRIPTED["e4m3fn_sinks"], False)[1]

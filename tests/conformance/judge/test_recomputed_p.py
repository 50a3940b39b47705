"""The floor for a p that a flash backward recomputes from its saved lse (``tolerance.floors``,
``baseline.BaselineGrads.recomputed_p``): a careful float32 kernel that exponentiates in base 2
and keeps lse in natural base (tokamax's Mosaic TPU splash, FlashAttention-2) passes, and it
earns its pass: trivial answers and a dv stored in bfloat16 still fail."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from conformance.judge import baseline, tolerance
from conformance.judge.inputs import build_dout, build_inputs
from conformance.plan.cases import Case
from reference import attention_backward, attention_forward

F32 = np.float32
LOG2E = F32(math.log2(math.e))


def _base2_kernel_dv(q, k, do, scale, visible):
    """dv of a float32 flash kernel working in base 2: q scaled into base 2 before the logits'
    matmul, lse saved in natural base and multiplied back by log2(e) in the backward pass."""
    s2 = ((q * F32(scale)).astype(F32) * LOG2E).astype(F32) @ k.swapaxes(-1, -2)
    s2 = np.where(visible, s2, F32(-3e38))
    m2 = s2.max(axis=-1, keepdims=True)
    lse = ((m2 + np.log2(np.exp2(s2 - m2).sum(axis=-1, keepdims=True))) / LOG2E).astype(F32)
    p = np.exp2(s2 - (lse * LOG2E).astype(F32))
    return p.swapaxes(-1, -2) @ do


@pytest.fixture(scope="module")
def single_key_rows():
    """Every row sees exactly its own key (window (0, 0)): the baseline's dv is exact."""
    case = Case("x", "float32", q_len=128, kv_len=128, head_dim=64, v_head_dim=64, window=(0, 0))
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    dout = build_dout(case, ref.fully_masked)
    grads = attention_backward(inputs, dout, case.spec, ref)
    base = baseline.gradients(inputs, case.spec, dout)
    visible = np.eye(128, dtype=bool)[None, None]
    scale = case.spec.resolved_scale(64)
    return inputs, dout, grads, base, visible, scale


def test_baseline_is_exact_where_rows_see_one_key(single_key_rows):
    _, _, grads, base, _, _ = single_key_rows
    assert np.abs(base.dv.astype(np.float64) - grads.dv).max() == 0.0
    assert base.recomputed_p["dv"] > 0.0


def test_a_base2_kernel_passes_only_with_the_recomputed_p_floor(single_key_rows):
    inputs, dout, grads, base, visible, scale = single_key_rows
    dv = _base2_kernel_dv(inputs.q, inputs.k, dout, scale, visible)
    without = tolerance.judge("dv", dv, grads.dv, base.dv, "float32")
    judged = tolerance.judge("dv", dv, grads.dv, base.dv, "float32", recomputed_p=base.recomputed_p["dv"])
    assert not without.passed  # one ulp of a base-2 lse, which the old floor did not allow
    assert judged.passed and not judged.weak


def test_the_floor_still_rejects_a_wrong_dv(single_key_rows):
    inputs, dout, grads, base, visible, scale = single_key_rows
    floor = base.recomputed_p["dv"]
    for wrong in (np.zeros_like(grads.dv), -grads.dv, np.roll(grads.dv, 1, axis=-2)):
        assert not tolerance.judge("dv", wrong, grads.dv, base.dv, "float32", recomputed_p=floor).passed
    dv = _base2_kernel_dv(inputs.q, inputs.k, dout, scale, visible)
    stored_bf16 = dv.astype(ml_dtypes.bfloat16).astype(F32)
    judged = tolerance.judge("dv", stored_bf16, grads.dv, base.dv, "float32", recomputed_p=floor)
    assert not judged.passed and judged.metrics.max_abs > 100 * judged.metrics.tolerance


def test_sink_floor_adds_the_shared_rounding_linearly():
    case = Case("x", "float32", q_len=16, kv_len=16, head_dim=8, v_head_dim=8, sinks="extreme", q_heads=2)
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    dout = build_dout(case, ref.fully_masked)
    grads = attention_backward(inputs, dout, case.spec, ref)
    base = baseline.gradients(inputs, case.spec, dout)
    shared = np.abs(inputs.sinks.astype(np.float64)) * np.abs(grads.dsinks)
    assert base.recomputed_p["dsinks"] >= 0.99 * shared.max()

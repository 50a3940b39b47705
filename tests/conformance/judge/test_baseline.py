"""Meta-tests of the baseline: plain attention at the subject's precision."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.judge import baseline, tolerance
from conformance.judge.inputs import build_dout, build_inputs
from conformance.plan.cases import Case
from reference import attention_backward, attention_forward

CASE = dict(
    batch=2,
    q_heads=4,
    kv_heads=2,
    q_len=24,
    kv_len=40,
    head_dim=8,
    v_head_dim=8,
    causal=True,
    alignment="bottom_right",
    bias="1h1k",
    softcap=5.0,
    kv_lengths=(40, 30),
)


def _errors(dtype: str) -> dict[str, float]:
    case = Case("x", dtype, **CASE)
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    dout = build_dout(case, ref.fully_masked)
    grads = attention_backward(inputs, dout, case.spec, ref)
    base, base_grads = baseline.forward(inputs, case.spec), baseline.gradients(inputs, case.spec, dout)
    valid = ~ref.fully_masked
    out = np.abs(base.out.astype(np.float64) - ref.out)[valid].max()
    errors = {"out": out, "lse": np.abs(base.lse.astype(np.float64) - ref.lse)[valid].max()}
    for name in ("dq", "dk", "dv", "dbias"):
        errors[name] = np.abs(getattr(base_grads, name).astype(np.float64) - getattr(grads, name)).max()
    assert base.out.dtype == inputs.q.dtype and base_grads.dbias.shape == inputs.bias.shape
    return errors


def test_float64_baseline_agrees_with_the_reference_to_rounding():
    assert max(_errors("float64").values()) < 1e-12


@pytest.mark.parametrize("dtype, eps", [("float32", 2**-23), ("bfloat16", 2**-7), ("float16", 2**-10)])
def test_baseline_error_is_a_few_hundred_ulps_at_most(dtype, eps):
    errors = _errors(dtype)
    assert 0 < errors["out"] < 100 * eps
    assert all(v < 2000 * eps for v in errors.values()), errors


def test_lower_precision_means_larger_baseline_error():
    e32, e16, ebf = _errors("float32"), _errors("float16"), _errors("bfloat16")
    assert e32["out"] < e16["out"] < ebf["out"]


def test_cancellation_magnitude_covers_single_key_rows():
    case = Case("x", "bfloat16", q_len=16, kv_len=1)
    inputs = build_inputs(case)
    ref = attention_forward(inputs, case.spec)
    dout = build_dout(case, ref.fully_masked)
    grads = attention_backward(inputs, dout, case.spec, ref)
    base = baseline.gradients(inputs, case.spec, dout)
    assert np.abs(grads.dq).max() < 1e-12  # exact cancellation
    assert base.cancellation["dq"] > 0.1 and base.cancellation["dk"] > 0.1
    noisy = grads.dq + 1e-3  # what rounding of delta leaves behind in a correct kernel
    judged = tolerance.judge("dq", noisy, grads.dq, base.dq, "bfloat16", cancellation=base.cancellation["dq"])
    assert judged.passed

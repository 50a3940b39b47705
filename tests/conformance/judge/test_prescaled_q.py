"""The baseline for a subject that scales q in q's own dtype before q.k (``Capabilities.q_prescaled``).

The case is the one tokamax[impl=mosaic_tpu] failed at ci (bfloat16, softcap 1, logits of std
44): with the cap at 1 only the logits near 0 carry a gradient, and there rounding ``q * scale``
(an error of ulps of |q||k| in each logit) costs 7x more than rounding the logits (ulps of the
logit). ``_prescaling_kernel`` is what such a kernel computes, in NumPy: it matched tokamax's
Mosaic TPU gradients on this case to 1.5e-5 in dq (errors ~9e-3) once it also rounds the
constants as the kernel does; here it keeps them exact, as splash's callers and a plain
``(q * scale) @ k`` do.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from conformance.judge import baseline
from conformance.judge.inputs import build_dout, build_inputs
from conformance.judge.tolerance import judge
from conformance.plan.cases import Case
from kernels.contract.base import Capabilities
from reference import attention_backward, attention_forward

CASE = Case(
    "x", "bfloat16", batch=1, q_heads=1, kv_heads=1, q_len=128, kv_len=128, head_dim=128, v_head_dim=64,
    input_kind="large", softcap=1.0,
)  # fmt: skip


def _bf16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64).astype(ml_dtypes.bfloat16).astype(np.float64)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def _prescaling_kernel(q, k, v, do, *, scale: float, cap: float, cap_grad: bool = True):
    """(dq, dk) of one head ([S, D] arrays of bf16 values) as a flash kernel that scales q in
    bf16 computes them: q*scale rounded, float32 matmuls and softmax, ds rounded to bf16 before
    its matmuls, gradients rounded to bf16; dq times the scale at the end. ``cap_grad=False``: a
    mutant that forgets the softcap's derivative."""
    qs = _bf16(q * scale)
    t = _f32(np.tanh(_f32(qs @ k.T) / cap))
    logits = _f32(cap * t)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p = _f32(p / p.sum(-1, keepdims=True))
    out = _bf16(p @ v)
    ds = _f32(_f32(_f32(do @ v.T) - _f32((do * out).sum(-1, keepdims=True))) * p)
    ds = _bf16(ds * _f32(1 - t * t) if cap_grad else ds)
    return _bf16(_bf16(ds @ k) * scale), _bf16(ds.T @ qs)


@pytest.fixture(scope="module")
def setting():
    inputs = build_inputs(CASE)
    ref_out = attention_forward(inputs, CASE.spec)
    dout = build_dout(CASE, ref_out.fully_masked)
    ref = attention_backward(inputs, dout, CASE.spec, ref_out)
    return inputs, dout, ref


def _judged(setting, model: baseline.Numerics, scale_factor: float = 1.0, cap_grad: bool = True) -> dict:
    """Each gradient's max-abs ratio to ``model``'s baseline, and whether all passed."""
    inputs, dout, ref = setting
    q, k, v, do = (np.asarray(x, np.float64)[0, 0] for x in (inputs.q, inputs.k, inputs.v, dout))
    scale = CASE.spec.resolved_scale(CASE.head_dim) * scale_factor
    dq, dk = _prescaling_kernel(q, k, v, do, scale=scale, cap=1.0, cap_grad=cap_grad)
    base = baseline.gradients(inputs, CASE.spec, dout, model)
    judged = {
        name: judge(name, got[None, None], getattr(ref, name), getattr(base, name), "bfloat16",
                    cancellation=base.cancellation.get(name, 0.0))
        for name, got in (("dq", dq), ("dk", dk))
    }  # fmt: skip
    return {
        **{n: j.metrics.ratio for n, j in judged.items()},
        "passed": all(j.passed for j in judged.values()),
    }


def test_scaling_after_q_k_flags_a_kernel_that_scales_q_first(setting):
    """The plain baseline rounds the logits, not q: a correct pre-scaling kernel is 7x off it."""
    judged = _judged(setting, baseline.Numerics())
    assert not judged["passed"] and judged["dq"] > 5 and judged["dk"] > 5, judged


def test_a_declared_prescaled_q_is_the_baselines_too(setting):
    judged = _judged(setting, baseline.Numerics(prescale_q=True))
    assert judged["passed"] and judged["dq"] < 2 and judged["dk"] < 2, judged


@pytest.mark.parametrize(
    "mutant",
    [dict(scale_factor=1.5), dict(scale_factor=0.5), dict(cap_grad=False)],
    ids=["scale_x1.5", "scale_x0.5", "no_cap_grad"],
)
def test_the_declaration_hides_no_wrong_kernel(setting, mutant):
    """A scale 50% off, or the softcap's derivative forgotten, still fails against the
    pre-scaling baseline (ratios 5.5, 6.2 and 82). In this case's gradients a cap of 1 hides
    smaller scale errors (x1.3: ratio 4.1), as it hides the rounding of q * scale: only logits
    near 0 carry a gradient. The forward and the uncapped cases judge the scale."""
    judged = _judged(setting, baseline.Numerics(prescale_q=True), **mutant)
    assert not judged["passed"], judged


def test_numerics_follows_the_declaration():
    assert baseline.numerics(Capabilities(dtypes=("bfloat16",), q_prescaled=True), "bfloat16").prescale_q
    assert not baseline.numerics(Capabilities(dtypes=("bfloat16",)), "bfloat16").prescale_q


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_prescaled_baseline_is_the_same_attention(dtype):
    """Scaling q first changes only roundings: float64 agrees with the reference to rounding,
    float32 with the plain float32 baseline to float32 precision."""
    case = dataclasses.replace(
        CASE, dtype=dtype, input_kind="normal", softcap=5.0, causal=True, kv_lengths=(100,)
    )
    inputs = build_inputs(case)
    ref_out = attention_forward(inputs, case.spec)
    dout = build_dout(case, ref_out.fully_masked)
    ref = attention_backward(inputs, dout, case.spec, ref_out)
    pre = baseline.Numerics(prescale_q=True)
    out, grads = baseline.forward(inputs, case.spec, pre), baseline.gradients(inputs, case.spec, dout, pre)
    tol = 1e-11 if dtype == "float64" else 1e-4
    assert np.abs(out.out - ref_out.out).max() < tol
    for name in ("dq", "dk", "dv"):
        assert np.abs(getattr(grads, name) - getattr(ref, name)).max() < tol * 10, name

"""Small cases and a reference comparison shared by the adapter tests.

The real tolerance policy lives in ``conformance/``; here a fixed per-dtype bound is
enough to tell a correct translation (errors ~1e-6 in float32) from a wrong one
(errors ~1e-1: a missing scale, a transposed layout, a bias added at the wrong step).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from kernels.contract.base import Adapter
from reference.attention import attention_backward, attention_forward
from reference.spec import AttentionInputs, AttentionSpec

# Absolute error allowed per unit of the reference's largest magnitude.
TOLERANCE = {"float32": 2e-5, "bfloat16": 3e-2, "float16": 5e-3, "float64": 1e-10}
NUMPY_DTYPE = {
    "float32": np.float32,
    "bfloat16": ml_dtypes.bfloat16,
    "float16": np.float16,
    "float64": np.float64,
}


def make_inputs(
    seed: int,
    b: int,
    hq: int,
    hkv: int,
    sq: int,
    sk: int,
    d: int,
    dtype: str = "float32",
    dv: int | None = None,
    bias_shape: tuple[int, ...] | None = None,
    segments: bool = False,
    **arrays: np.ndarray,
) -> AttentionInputs:
    """Normal q, k, v (``[B, H, S, D]``) cast to ``dtype``; optional bias and segment ids.

    Logits are scaled normals, not uniform [0, 1): a near-uniform softmax would let a
    kernel that returns mean(V) pass.
    """
    rng = np.random.default_rng(seed)
    cast = NUMPY_DTYPE[dtype]
    q = (rng.standard_normal((b, hq, sq, d)) * 1.5).astype(cast)
    k = (rng.standard_normal((b, hkv, sk, d)) * 1.5).astype(cast)
    v = rng.standard_normal((b, hkv, sk, dv or d)).astype(cast)
    if bias_shape is not None:
        arrays["bias"] = rng.standard_normal(bias_shape).astype(cast)
    if segments:
        # Two segments per batch row with different cut points in q and kv.
        arrays["q_segment_ids"] = (np.arange(sq)[None, :] >= np.array([[sq // 3]] * b)).astype(np.int32)
        arrays["kv_segment_ids"] = (np.arange(sk)[None, :] >= np.array([[sk // 2]] * b)).astype(np.int32)
    return AttentionInputs(q=q, k=k, v=v, **arrays)


def max_error(actual: np.ndarray, expected: np.ndarray, rows: np.ndarray | None = None) -> float:
    """Largest |actual - expected| relative to max(1, max|expected|), over ``rows`` if given."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if rows is not None:
        a, e = a[rows], e[rows]
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - e)) / max(1.0, float(np.max(np.abs(e)))))


def check_forward(
    adapter: Adapter, inputs: AttentionInputs, spec: AttentionSpec, dtype: str, lse: bool = True
) -> str:
    """Compare out (and lse where declared, unless ``lse`` is False: a known issue's) with the
    float64 reference on rows that see a key."""
    result = adapter.forward(inputs, spec)
    ref = attention_forward(inputs, spec)
    live = ~ref.fully_masked
    tol = TOLERANCE[dtype]
    assert result.out.shape == ref.out.shape
    err = max_error(result.out, ref.out, live)
    assert err <= tol, f"{adapter.name} out error {err:.3g} > {tol} ({spec})"
    if adapter.capabilities().lse and lse:
        assert result.lse is not None, f"{adapter.name} declares lse but returned none"
        err = max_error(result.lse, ref.lse, live)
        assert err <= tol, f"{adapter.name} lse error {err:.3g} > {tol}"
    assert result.ran, f"{adapter.name} did not say what ran"
    return result.ran


def check_gradients(adapter: Adapter, inputs: AttentionInputs, spec: AttentionSpec, dtype: str) -> None:
    """Compare dq, dk, dv (and dbias, dsinks) with the reference, with dout zero on fully masked rows.

    Rows that see no key have no canonical output (``docs/semantics.md``); a kernel
    that returns mean(V) there passes gradient through them, so they carry no dout here.
    """
    ref = attention_forward(inputs, spec)
    rng = np.random.default_rng(1)
    dout = rng.standard_normal(ref.out.shape) * ~ref.fully_masked[..., None]
    dout = dout.astype(inputs.q.dtype)
    grads = adapter.gradients(inputs, spec, dout)
    expected = attention_backward(inputs, dout, spec, forward=ref)
    tol = 4 * TOLERANCE[dtype]
    pairs = [("dq", grads.dq, expected.dq), ("dk", grads.dk, expected.dk), ("dv", grads.dv, expected.dv)]
    if inputs.bias is not None and adapter.capabilities().bias_grad:
        pairs.append(("dbias", grads.dbias, expected.dbias))
    if inputs.sinks is not None and adapter.capabilities().sinks_grad:
        pairs.append(("dsinks", grads.dsinks, expected.dsinks))
    for name, actual, want in pairs:
        assert actual is not None and actual.shape == want.shape, f"{adapter.name} {name} shape"
        err = max_error(actual, want)
        assert err <= tol, f"{adapter.name} {name} error {err:.3g} > {tol} ({spec})"

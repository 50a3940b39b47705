"""jax.nn.dot_product_attention(implementation='xla') against the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.adapters.xla import XlaAdapter
from reference.spec import AttentionSpec
from tests.kernels.cases import check_forward, check_gradients, make_inputs


@pytest.fixture(scope="module")
def adapter():
    adapter = XlaAdapter()
    availability = adapter.availability()
    if not availability.available:
        pytest.skip(f"xla unavailable: {availability.reason}")
    return adapter


def _mask(b, sq, sk):
    return np.random.default_rng(2).random((b, 1, sq, sk)) > 0.3


CASES = {
    "gqa-plain": (dict(b=2, hq=4, hkv=2, sq=32, sk=48, d=16), AttentionSpec()),
    "causal-bias-mask": (
        dict(b=2, hq=4, hkv=1, sq=32, sk=48, d=16, bias_shape=(1, 4, 1, 48), mask=_mask(2, 32, 48)),
        AttentionSpec(causal=True, scale=0.2),
    ),
    "window-lengths": (
        dict(
            b=2, hq=2, hkv=2, sq=40, sk=40, d=8, q_lengths=np.array([40, 17]), kv_lengths=np.array([25, 40])
        ),
        AttentionSpec(window=(3, 2)),
    ),
    "window-one-sided-causal": (
        dict(b=1, hq=2, hkv=2, sq=24, sk=40, d=8),
        AttentionSpec(causal=True, window=(5, None)),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_match_reference(adapter, case):
    shape, spec = CASES[case]
    inputs = make_inputs(0, **shape)
    ran = check_forward(adapter, inputs, spec, "float32")
    assert "XLA ops" in ran
    check_gradients(adapter, inputs, spec, "float32")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_forward(adapter, dtype):
    if dtype not in adapter.capabilities().dtypes:
        pytest.skip(f"{dtype} not declared on this backend")
    inputs = make_inputs(1, 1, 2, 2, 32, 32, 16, dtype=dtype)
    check_forward(adapter, inputs, AttentionSpec(causal=True), dtype)


@pytest.mark.parametrize("chunk", [1, 48, 256])
def test_chunked_causal_through_the_boolean_mask(adapter, chunk):
    """jax.nn has no chunked mask: the adapter folds it into the boolean mask
    (kernels/runtime/chunked_mask.py), here ANDed with a mask of the case's own and with kv lengths."""
    mask = np.random.default_rng(2).random((2, 1, 256, 256)) > 0.1
    inputs = make_inputs(9, b=2, hq=2, hkv=1, sq=256, sk=256, d=32, mask=mask, kv_lengths=np.array([256, 1]))
    spec = AttentionSpec(causal=True, chunk=chunk)
    assert adapter.capabilities().chunked_causal_alignments == ("top_left",)
    check_forward(adapter, inputs, spec, "float32")
    check_gradients(adapter, inputs, spec, "float32")

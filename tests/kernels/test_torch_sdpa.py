"""PyTorch SDPA on CPU against the float64 reference (skipped when PyTorch is not installed)."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from kernels.adapters.torch_sdpa import TorchSdpaAdapter
from reference.attention import attention_forward
from reference.spec import AttentionSpec
from tests.kernels.cases import check_forward, check_gradients, make_inputs


@pytest.fixture(scope="module")
def adapter():
    adapter = TorchSdpaAdapter()
    availability = adapter.availability()
    if not availability.available:
        pytest.skip(f"torch_sdpa unavailable: {availability.reason}")
    return adapter


def _mask(seed, shape):
    return np.random.default_rng(seed).random(shape) > 0.3


CASES = {
    "gqa-causal": (dict(b=2, hq=4, hkv=2, sq=16, sk=24, d=8), AttentionSpec(causal=True)),
    "bias-mask-causal-dv": (
        dict(
            b=1, hq=2, hkv=2, sq=16, sk=24, d=8, dv=6, bias_shape=(1, 2, 16, 1), mask=_mask(0, (1, 2, 16, 24))
        ),
        AttentionSpec(causal=True, scale=0.4),
    ),
    "bias-only": (dict(b=2, hq=2, hkv=1, sq=8, sk=8, d=16, bias_shape=(2, 1, 8, 8)), AttentionSpec()),
}


@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_match_reference(adapter, case):
    shape, spec = CASES[case]
    inputs = make_inputs(0, **shape)
    ran = check_forward(adapter, inputs, spec, "float32")
    assert ran.startswith("torch SDPA: ")
    check_gradients(adapter, inputs, spec, "float32")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64"])
def test_other_dtypes(adapter, dtype):
    inputs = make_inputs(1, 1, 2, 2, 16, 16, 8, dtype=dtype)
    check_forward(adapter, inputs, AttentionSpec(causal=True), dtype)


def test_fully_masked_rows_are_zeros_as_declared(adapter):
    mask = np.ones((1, 1, 8, 8), bool)
    mask[..., 3, :] = False
    inputs = make_inputs(2, 1, 2, 2, 8, 8, 4, mask=mask)
    assert adapter.capabilities().fully_masked_rows == "zeros"
    out = adapter.forward(inputs, AttentionSpec()).out
    np.testing.assert_array_equal(out[:, :, 3], 0)
    np.testing.assert_allclose(out, attention_forward(inputs).out, atol=2e-6)


def test_missing_torch_is_reported_not_raised(monkeypatch):
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    availability = TorchSdpaAdapter().availability()
    assert not availability.available
    assert "optional extra" in availability.reason and "torch==2.13.0" in availability.reason

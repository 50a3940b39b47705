"""Dropout in the float64 reference and the baseline (docs/semantics.md, "Dropout"): the normalised
weights times ``keep / (1 - rate)``, lse unchanged, and gradients that are the derivative of that
forward (central differences), with the mask fixed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conformance.judge import baseline
from reference import AttentionInputs, AttentionSpec, attention_backward, attention_forward
from reference.spec import Dropout


def _case(seed: int = 0) -> tuple[AttentionInputs, Dropout]:
    rng = np.random.default_rng(seed)
    inputs = AttentionInputs(
        q=rng.standard_normal((2, 4, 5, 3)),
        k=rng.standard_normal((2, 2, 6, 3)),
        v=rng.standard_normal((2, 2, 6, 4)),
        bias=rng.standard_normal((1, 4, 5, 6)),
    )
    return inputs, Dropout(rng.random((2, 4, 5, 6)) >= 0.3, 0.3)


def _dense(inputs: AttentionInputs, spec: AttentionSpec, dropout: Dropout) -> np.ndarray:
    """The semantics written out: softmax over visible keys, times keep / (1 - rate), times v."""
    k, v = (np.repeat(x, 2, axis=1) for x in (inputs.k, inputs.v))
    s = inputs.q @ k.swapaxes(-1, -2) * spec.resolved_scale(3) + inputs.bias
    if spec.causal:
        s = np.where(np.tril(np.ones((5, 6), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p * dropout.keep / (1 - dropout.rate)) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_the_forward_is_the_softmax_times_the_kept_weights(causal: bool):
    inputs, dropout = _case()
    spec = AttentionSpec(causal=causal)
    got = attention_forward(inputs, spec, dropout)
    np.testing.assert_allclose(got.out, _dense(inputs, spec, dropout), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got.lse, attention_forward(inputs, spec).lse)  # lse is the softmax's


def test_keeping_every_weight_scales_the_output_by_one_over_one_minus_rate():
    inputs, _ = _case()
    keep_all = Dropout(np.ones((1, 1, 5, 6), dtype=bool), 0.5)
    np.testing.assert_allclose(
        attention_forward(inputs, dropout=keep_all).out, 2 * attention_forward(inputs).out, rtol=1e-14
    )


def test_the_gradients_are_the_derivative_of_the_dropout_forward():
    inputs, dropout = _case(1)
    spec = AttentionSpec(causal=True)
    dout = np.random.default_rng(2).standard_normal((2, 4, 5, 4))
    grads = attention_backward(inputs, dout, spec, dropout=dropout)
    eps = 1e-6
    for name in ("q", "k", "v", "bias"):
        x = getattr(inputs, name)
        numeric = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[index] += eps
            down[index] -= eps
            f = [
                float(
                    np.sum(
                        attention_forward(dataclasses.replace(inputs, **{name: y}), spec, dropout).out * dout
                    )
                )
                for y in (up, down)
            ]
            numeric[index] = (f[0] - f[1]) / (2 * eps)
        got = getattr(grads, "d" + name)
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-7, err_msg=f"d{name}")


def test_a_backward_without_the_mask_differs_from_one_with_it():
    inputs, dropout = _case()
    dout = np.random.default_rng(3).standard_normal((2, 4, 5, 4))
    with_mask = attention_backward(inputs, dout, dropout=dropout)
    without = attention_backward(inputs, dout)
    for name in ("dq", "dk", "dv"):
        assert np.abs(getattr(with_mask, name) - getattr(without, name)).max() > 1e-2


def test_the_float32_baseline_with_dropout_is_near_the_reference():
    inputs, dropout = _case()
    as32 = dataclasses.replace(
        inputs, **{n: getattr(inputs, n).astype(np.float32) for n in ("q", "k", "v", "bias")}
    )
    dout = np.random.default_rng(4).standard_normal((2, 4, 5, 4)).astype(np.float32)
    ref = attention_forward(as32, dropout=dropout)
    got = baseline.forward(as32, AttentionSpec(), dropout=dropout)
    np.testing.assert_allclose(got.out, ref.out, rtol=1e-5, atol=1e-6)
    ref_grads = attention_backward(as32, dout, dropout=dropout)
    grads = baseline.gradients(as32, AttentionSpec(), dout, dropout=dropout)
    for name in ("dq", "dk", "dv", "dbias"):
        np.testing.assert_allclose(getattr(grads, name), getattr(ref_grads, name), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_a_rate_outside_zero_to_one_is_refused(rate: float):
    with pytest.raises(ValueError, match="outside"):
        Dropout(np.ones((1, 1, 2, 2), dtype=bool), rate)


def test_a_mask_that_is_not_boolean_is_refused():
    with pytest.raises(ValueError, match="bool"):
        Dropout(np.ones((1, 1, 2, 2)), 0.1)

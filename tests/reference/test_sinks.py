"""Attention sinks in the float64 reference: what the formula implies at its edges
(docs/semantics.md, "Attention sinks"). Agreement with mpmath is in test_mpmath_agreement."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conformance.judge import baseline
from reference import AttentionInputs, AttentionSpec, attention_backward, attention_forward


def _inputs(seed: int = 0, hq: int = 4, hkv: int = 2, sq: int = 5, sk: int = 6) -> AttentionInputs:
    rng = np.random.default_rng(seed)
    return AttentionInputs(
        q=rng.standard_normal((2, hq, sq, 3)),
        k=rng.standard_normal((2, hkv, sk, 3)),
        v=rng.standard_normal((2, hkv, sk, 4)),
        sinks=rng.standard_normal(hq) + 1.0,
    )


def test_a_sink_of_minus_infinity_is_no_sink():
    with_sinks = _inputs()
    inputs = dataclasses.replace(with_sinks, sinks=np.full(4, -np.inf))
    plain = dataclasses.replace(with_sinks, sinks=None)
    spec = AttentionSpec(causal=True)
    a, b = attention_forward(inputs, spec), attention_forward(plain, spec)
    np.testing.assert_array_equal(a.out, b.out)
    np.testing.assert_array_equal(a.lse, b.lse)
    dout = np.random.default_rng(1).standard_normal(a.out.shape)
    grads = attention_backward(inputs, dout, spec, a)
    np.testing.assert_array_equal(grads.dsinks, np.zeros(4))
    np.testing.assert_array_equal(grads.dq, attention_backward(plain, dout, spec, b).dq)


def test_the_sink_takes_its_share_of_the_denominator():
    inputs = _inputs()
    plain = dataclasses.replace(inputs, sinks=None)
    ref, ref_plain = attention_forward(inputs), attention_forward(plain)
    sinks = inputs.sinks[None, :, None]
    np.testing.assert_allclose(ref.lse, np.logaddexp(ref_plain.lse, sinks), rtol=1e-14)
    share = np.exp(ref_plain.lse - ref.lse)[..., None]  # 1 - p_sink
    np.testing.assert_allclose(ref.out, ref_plain.out * share, rtol=1e-13, atol=1e-15)


def test_a_row_that_sees_no_key_keeps_only_its_sink():
    inputs = dataclasses.replace(_inputs(), q_lengths=np.array([5, 2]))
    ref = attention_forward(inputs)
    assert not ref.fully_masked.any(), "a sink is a term of every row's softmax"
    np.testing.assert_array_equal(ref.out[1, :, 2:], 0.0)
    np.testing.assert_array_equal(ref.lse[1, :, 2:], np.broadcast_to(inputs.sinks[:, None], (4, 3)))
    dout = np.random.default_rng(2).standard_normal(ref.out.shape)
    grads = attention_backward(inputs, dout, AttentionSpec(), ref)
    np.testing.assert_array_equal(grads.dq[1, :, 2:], 0.0)


def test_softcap_leaves_the_sink_alone():
    """Canonical: the sink is used as given; capping it would change lse on a no-key row."""
    inputs = dataclasses.replace(_inputs(), q_lengths=np.array([5, 0]))
    inputs = dataclasses.replace(inputs, sinks=np.array([30.0, -1e4, 3.0, 0.5]))
    ref = attention_forward(inputs, AttentionSpec(softcap=1.0))
    np.testing.assert_array_equal(ref.lse[1, :, 0], inputs.sinks)


@pytest.mark.parametrize("bad, match", [(np.zeros(3), r"sinks must be \[Hq\]"), (np.full(4, np.nan), "NaN")])
def test_bad_sinks_are_rejected_with_the_fix(bad, match):
    with pytest.raises(ValueError, match=match):
        attention_forward(dataclasses.replace(_inputs(), sinks=bad))


def test_the_baseline_in_float64_is_the_reference():
    """At float64 the baseline (one pass, sink as one more column) has nothing to round away."""
    inputs = dataclasses.replace(_inputs(3), q_lengths=np.array([5, 1]))
    spec = AttentionSpec(causal=True, softcap=2.0)
    ref = attention_forward(inputs, spec)
    base = baseline.forward(inputs, spec)
    np.testing.assert_allclose(base.out, ref.out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(base.lse, ref.lse, rtol=1e-12)
    dout = np.random.default_rng(4).standard_normal(ref.out.shape)
    grads, base_grads = attention_backward(inputs, dout, spec, ref), baseline.gradients(inputs, spec, dout)
    for name in ("dq", "dk", "dv", "dsinks"):
        np.testing.assert_allclose(getattr(base_grads, name), getattr(grads, name), rtol=1e-10, atol=1e-13)
    assert base_grads.cancellation["dsinks"] >= np.abs(grads.dsinks).max()

"""Splash attention against the float64 reference, in Pallas interpret mode on CPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kernels.adapters.splash import SplashAdapter
from reference.spec import AttentionSpec
from tests.kernels.cases import check_forward, check_gradients, make_inputs

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def adapter():
    adapter = SplashAdapter()
    availability = adapter.availability()
    if not availability.available:
        pytest.skip(f"splash unavailable: {availability.reason}")
    return adapter


def test_gqa_forward_and_gradients(adapter):
    inputs = make_inputs(0, b=1, hq=2, hkv=1, sq=256, sk=256, d=128)
    assert check_forward(adapter, inputs, AttentionSpec(), "float32").startswith("pallas_call x1 ")
    check_gradients(adapter, inputs, AttentionSpec(), "float32")


def test_segments_bottom_right_softcap_forward_and_gradients(adapter):
    """Sq != Sk: bottom-right causal needs CausalMask(offset=Sk-Sq); softcap follows the scale."""
    inputs = make_inputs(1, b=2, hq=1, hkv=1, sq=128, sk=256, d=128, segments=True)
    spec = AttentionSpec(causal=True, alignment="bottom_right", softcap=5.0, scale=0.2)
    check_forward(adapter, inputs, spec, "float32")
    check_gradients(adapter, inputs, spec, "float32")


def test_causal_window_with_distinct_v_dim(adapter):
    capabilities = adapter.capabilities()
    if not capabilities.distinct_v_dim:
        pytest.skip("Dv != D not supported on this JAX")
    inputs = make_inputs(2, b=1, hq=2, hkv=2, sq=256, sk=256, d=64, dv=32)
    if capabilities.violated_constraints(inputs.shape, AttentionSpec(), "forward"):
        inputs = make_inputs(2, b=1, hq=2, hkv=2, sq=256, sk=256, d=128, dv=256)
    check_forward(adapter, inputs, AttentionSpec(causal=True, window=(40, None)), "float32")


def test_declared_head_dim_constraint_really_raises(adapter):
    dv = 32 if adapter.capabilities().distinct_v_dim else 64
    inputs = make_inputs(6, b=1, hq=1, hkv=1, sq=128, sk=128, d=64, dv=dv)
    violated = adapter.capabilities().violated_constraints(inputs.shape, AttentionSpec(), "forward")
    if not violated:
        pytest.skip("no head-dim limit on this JAX")
    assert all(c.raises for c in violated)
    with pytest.raises(NotImplementedError):
        adapter.forward(inputs, AttentionSpec())


def test_boolean_mask_that_differs_per_batch(adapter):
    mask = np.random.default_rng(3).random((2, 1, 128, 128)) > 0.2
    inputs = make_inputs(3, b=2, hq=1, hkv=1, sq=128, sk=128, d=128, mask=mask)
    ran = check_forward(adapter, inputs, AttentionSpec(window=(10, 20)), "float32")
    assert ran.startswith("pallas_call x2 "), "one kernel per batch element"


def test_its_jax_call_is_the_call_forward_runs_and_a_per_row_mask_declares_no_vmap(adapter):
    """The call the vmap and sharded checks transform is the one forward jits and runs; a mask
    that differs across the batch is built into one kernel per row, which vmap cannot reverse."""
    from kernels.adapters.splash import PER_ROW_MASK_NO_VMAP

    per_row = np.random.default_rng(3).random((2, 1, 128, 128)) > 0.2
    for mask, no_vmap in ((per_row, PER_ROW_MASK_NO_VMAP), (per_row[:1], "")):
        inputs = make_inputs(3, b=2, hq=1, hkv=1, sq=128, sk=128, d=128, mask=mask)
        call = adapter.jax_call(inputs, AttentionSpec())
        assert call.no_vmap == no_vmap
        assert call.batched == (True, True, True, True, True, False)  # sinks are shared
        with call.context():
            out, _ = call.fn(*call.args)
        np.testing.assert_array_equal(np.asarray(out), adapter.forward(inputs, AttentionSpec()).out)


def test_bfloat16_forward(adapter):
    inputs = make_inputs(4, b=1, hq=2, hkv=2, sq=128, sk=128, d=128, dtype="bfloat16")
    check_forward(adapter, inputs, AttentionSpec(causal=True), "bfloat16")


@pytest.mark.parametrize(
    "name, sq, sk", [("q_len_multiple_of_block_q", 192, 128), ("kv_len_multiple_of_block_kv", 128, 192)]
)
def test_declared_raising_constraints_really_raise(adapter, name, sq, sk):
    inputs = make_inputs(5, b=1, hq=1, hkv=1, sq=sq, sk=sk, d=128)
    violated = adapter.capabilities().violated_constraints(inputs.shape, AttentionSpec(), "forward")
    assert [c.name for c in violated] == [name] and violated[0].raises
    with pytest.raises(ValueError):
        adapter.forward(inputs, AttentionSpec())


def test_sinks_are_declared_from_jax_0_7_1(adapter):
    from kernels.runtime.jax_runtime import jax_version

    assert adapter.capabilities().sinks == (jax_version() >= (0, 7, 1))
    assert adapter.capabilities().sinks_grad == adapter.capabilities().sinks


def test_sinks_forward_and_gradients_including_dsinks(adapter):
    """GQA with causal and softcap: the kernel caps q.k only and starts each row's max at the sink."""
    if not adapter.capabilities().sinks:
        pytest.skip("splash takes no sinks before JAX 0.7.1")
    inputs = make_inputs(7, b=2, hq=4, hkv=2, sq=128, sk=128, d=64)
    inputs = dataclasses.replace(inputs, sinks=np.array([30.0, -1e4, 2.0, 6.0], dtype=np.float32))
    spec = AttentionSpec(causal=True, softcap=5.0)
    check_forward(adapter, inputs, spec, "float32")
    check_gradients(adapter, inputs, spec, "float32")


@pytest.mark.parametrize("causal", [False, True])
def test_window_unbounded_on_both_sides_is_no_window(adapter, causal):
    """(None, None) bounds nothing: the full (or causal) mask, not a LocalMask that splash rejects."""
    inputs = make_inputs(2, b=1, hq=1, hkv=1, sq=128, sk=128, d=128)
    check_forward(adapter, inputs, AttentionSpec(causal=causal, window=(None, None)), "float32")


def test_chunked_causal_is_declared_top_left_from_jax_0_6_0(adapter):
    from kernels.runtime.jax_runtime import jax_version

    capabilities = adapter.capabilities()
    assert capabilities.chunked_causal_alignments == ("top_left",), "ChunkedCausalMask has no offset"
    missing = [c for c in capabilities.constraints if c.name == "chunked_causal_mask_missing"]
    assert bool(missing) == (jax_version() < (0, 6, 0))


def test_chunked_causal_is_unsupported_with_its_reason_where_splash_has_no_chunked_mask(monkeypatch):
    from kernels.adapters import splash

    api = splash._load_api()
    monkeypatch.setattr(splash, "_load_api", lambda: dataclasses.replace(api, chunked=False))
    inputs = make_inputs(0, b=1, hq=1, hkv=1, sq=128, sk=128, d=128)
    spec = AttentionSpec(causal=True, chunk=64)
    reasons = SplashAdapter().capabilities().admits(inputs, spec, "float32", "forward", ("chunked_causal",))
    assert [e.text for e in reasons] == [f"chunked_causal_mask_missing: {splash.CHUNKED_REASON}"]
    assert not reasons[0].raises


@pytest.mark.parametrize("sq, sk", [(128, 128), (128, 256), (256, 128)])
def test_chunked_causal_mask_is_the_canonical_top_left_chunk(adapter, sq, sk):
    """ChunkedCausalMask's own mask equals the reference's visibility, Sq == Sk and both Sq != Sk."""
    from kernels.adapters import splash
    from reference.masks import full_visibility

    spec = AttentionSpec(causal=True, chunk=48)
    inputs = make_inputs(0, b=1, hq=1, hkv=1, sq=sq, sk=sk, d=8)
    layout = splash.mask_layout(True, "top_left", None, sq, sk, 48)
    mask = splash.splash_mask(splash._load_api().module, layout, None, 1, sq, sk)
    np.testing.assert_array_equal(np.asarray(mask[0:1, 0:sq, 0:sk])[0], full_visibility(spec, inputs)[0, 0])


@pytest.mark.parametrize(
    "spec, sq, sk",
    [
        (AttentionSpec(causal=True, chunk=48), 256, 256),  # a short last chunk, chunks across blocks
        (AttentionSpec(causal=True, chunk=1), 128, 256),  # only the diagonal; Sq < Sk
        (AttentionSpec(causal=True, chunk=64, window=(20, None)), 256, 128),  # with a window; Sq > Sk
    ],
)
def test_chunked_causal_forward_and_gradients(adapter, spec, sq, sk):
    inputs = make_inputs(8, b=1, hq=2, hkv=1, sq=sq, sk=sk, d=128)
    check_forward(adapter, inputs, spec, "float32")
    check_gradients(adapter, inputs, spec, "float32")

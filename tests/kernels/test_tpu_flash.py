"""TPU flash attention against the float64 reference, in Pallas interpret mode on CPU.

Shapes are the smallest the kernel's default 128-blocks allow, so that several
kv blocks (online softmax across blocks) are exercised at S=256.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels.adapters.tpu_flash import TpuFlashAdapter
from kernels.runtime.jax_runtime import jax_version
from kernels.runtime.tpu_interpret import TPU_INTERPRET_NO_VMAP, tpu_interpret_mode_missing
from reference.spec import AttentionInputs, AttentionSpec
from tests.kernels.cases import check_forward, check_gradients, make_inputs

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def adapter():
    adapter = TpuFlashAdapter()
    availability = adapter.availability()
    if not availability.available:
        pytest.skip(f"tpu_flash unavailable: {availability.reason}")
    return adapter


CASES = {
    "plain-256x256": (dict(b=1, hq=2, hkv=2, sq=256, sk=256, d=128), AttentionSpec()),
    "causal-bias-broadcast-128x256": (
        dict(b=1, hq=2, hkv=2, sq=128, sk=256, d=128, bias_shape=(1, 2, 1, 256)),
        AttentionSpec(causal=True),
    ),
    "segments-scale-256x256-d64": (
        dict(b=2, hq=1, hkv=1, sq=256, sk=256, d=64, segments=True),
        AttentionSpec(scale=0.3),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_match_reference(adapter, case):
    shape, spec = CASES[case]
    inputs = make_inputs(0, **shape)
    ran = check_forward(adapter, inputs, spec, "float32")
    assert ran.startswith("pallas_call x1 ")
    check_gradients(adapter, inputs, spec, "float32")


def test_bias_is_divided_by_the_scale(adapter):
    """With a scale far from 1, a bias passed as-is to ``ab`` would be off by 1/scale."""
    inputs = make_inputs(3, 1, 1, 1, 128, 128, 128, bias_shape=(1, 1, 128, 128))
    check_forward(adapter, inputs, AttentionSpec(scale=0.05), "float32")


def test_bfloat16_forward(adapter):
    inputs = make_inputs(4, 1, 2, 2, 128, 256, 128, dtype="bfloat16")
    check_forward(adapter, inputs, AttentionSpec(causal=True), "bfloat16")


def test_compiled_functions_are_reused(adapter):
    inputs = make_inputs(5, 1, 1, 1, 128, 128, 128)
    adapter.forward(inputs, AttentionSpec())
    entries = len(adapter._cache)
    adapter.forward(make_inputs(6, 1, 1, 1, 128, 128, 128), AttentionSpec())
    assert len(adapter._cache) == entries


@pytest.mark.parametrize(
    "name, shape, direction, error",
    [
        ("kv_len_multiple_of_block_k", dict(sq=128, sk=192, d=128), "forward", ValueError),
        ("q_len_at_least_block_q", dict(sq=64, sk=128, d=128), "forward", ValueError),
        ("head_dim_lane_multiple", dict(sq=128, sk=256, d=192), "forward", NotImplementedError),
        ("backward_blocks_divide_lengths", dict(sq=192, sk=128, d=128), "backward", ValueError),
    ],
)
def test_declared_raising_constraints_really_raise(adapter, name, shape, direction, error):
    inputs = make_inputs(7, b=1, hq=1, hkv=1, **shape)
    spec = AttentionSpec()
    violated = adapter.capabilities().violated_constraints(inputs.shape, spec, direction)
    assert [c.name for c in violated] == [name]
    assert violated[0].raises
    with pytest.raises(error):
        if direction == "forward":
            adapter.forward(inputs, spec)
        else:
            adapter.gradients(inputs, spec, np.zeros(inputs.q.shape, np.float32))


def test_forward_allows_q_len_not_multiple_of_128(adapter):
    """No constraint is declared for forward q_len % 128: the partial last q block must be right."""
    inputs = make_inputs(8, 1, 1, 1, 192, 128, 128)
    assert not adapter.capabilities().violated_constraints(inputs.shape, AttentionSpec(), "forward")
    check_forward(adapter, inputs, AttentionSpec(), "float32")


def test_tpu_interpret_mode():
    adapter = TpuFlashAdapter(interpreter="tpu")
    availability = adapter.availability()
    missing = tpu_interpret_mode_missing()
    assert availability.available == (missing is None)
    if missing is not None:
        assert "0.7.0" in availability.reason
        pytest.skip(missing)
    inputs = make_inputs(9, 1, 1, 1, 128, 256, 128)
    ran = check_forward(adapter, inputs, AttentionSpec(causal=True), "float32")
    assert "TPU interpret mode" in ran
    # vmap cannot run under it (the interpreter's limit, read in its source): the call says so
    assert adapter.jax_call(inputs, AttentionSpec()).no_vmap == TPU_INTERPRET_NO_VMAP
    assert TpuFlashAdapter().jax_call(inputs, AttentionSpec()).no_vmap == ""


def test_fallback_without_pallas_call_is_reported(adapter, monkeypatch):
    """If the traced function held no pallas_call, ``ran`` must say so rather than look normal."""
    from kernels.runtime.jax_runtime import TracedPrimitives  # what the Pallas TPU adapters count

    monkeypatch.setattr(TracedPrimitives, "count", lambda self, name_prefix: 0)
    fresh = TpuFlashAdapter()
    ran = fresh.forward(make_inputs(10, 1, 1, 1, 128, 128, 128), AttentionSpec()).ran
    assert ran.startswith("no pallas_call traced")


def test_int_indexer_shim_is_gated_to_old_jax():
    from jax.experimental import pallas as pl

    from kernels.runtime.tpu_interpret import (
        INT_INDEXER_SHIM_BEFORE,
        interpreted_copy,
        interpreting_overrides,
    )

    namespace = interpreted_copy("jax.experimental.pallas.ops.tpu.flash_attention").pl
    shimmed = "load" in vars(namespace)
    assert shimmed == (jax_version() < INT_INDEXER_SHIM_BEFORE)
    assert namespace.pallas_call.keywords == {"interpret": True}
    assert set(interpreting_overrides(pl, True)) == {"pallas_call", "load", "store"}


def test_inputs_are_not_mutated(adapter):
    inputs = make_inputs(11, 1, 1, 1, 128, 128, 128, bias_shape=(1, 1, 128, 128))
    before = [np.copy(a) for a in (inputs.q, inputs.k, inputs.v, inputs.bias)]
    adapter.forward(inputs, AttentionSpec(scale=0.5))
    for old, new in zip(before, (inputs.q, inputs.k, inputs.v, inputs.bias), strict=True):
        np.testing.assert_array_equal(old, new)


def test_inputs_helper_shapes():
    inputs: AttentionInputs = make_inputs(0, 2, 4, 2, 8, 16, 4, dv=6)
    assert inputs.shape.group_size == 2 and inputs.v.shape == (2, 2, 16, 6)

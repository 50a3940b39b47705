"""``artifacts.lower_shared``: within a run, one lowering per program (``LoweringCall.program_key``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from conformance.judge import artifacts
from kernels.hardware.lowering import LoweringCall
from reference.spec import AttentionSpec
from tests.kernels.cases import make_inputs


class _Adapter:
    """Stands for an adapter: the memo is kept per adapter instance."""


def _call(traced: list, key: object, rows: int = 256) -> LoweringCall:
    def fn(x):
        traced.append(x.shape)  # runs once per trace
        return x * 2

    return LoweringCall("tpu", fn, (jax.ShapeDtypeStruct((rows, 128), jnp.float32),), key=key)


def test_equal_programs_lower_once_and_any_difference_lowers_again():
    adapter, traced = _Adapter(), []
    first = artifacts.lower_shared(adapter, _call(traced, "program"))
    assert first.lowered, first.error
    assert artifacts.lower_shared(adapter, _call(traced, "program")) is first
    assert len(traced) == 1
    artifacts.lower_shared(adapter, _call(traced, "another program"))
    artifacts.lower_shared(adapter, _call(traced, "program", rows=128))  # another shape
    artifacts.lower_shared(_Adapter(), _call(traced, "program"))  # another adapter keeps its own
    assert len(traced) == 4


def test_a_call_without_a_key_is_lowered_every_time():
    adapter, traced = _Adapter(), []
    artifacts.lower_shared(adapter, _call(traced, None))
    artifacts.lower_shared(adapter, _call(traced, None))
    assert len(traced) == 2


def test_a_described_call_is_keyed_by_what_its_program_depends_on():
    """tpu_flash's lowering calls: two cases that differ only in their values (another seed) are one
    program; causal, another block config or another shape is another."""
    tpu_flash = pytest.importorskip("kernels.adapters.tpu_flash")
    adapter = tpu_flash.TpuFlashAdapter()
    inputs = make_inputs(0, 1, 2, 2, 128, 128, 64)

    def key(inputs, spec=None, direction="forward", adapter=adapter):
        return adapter.lowering(inputs, spec or AttentionSpec(), direction).program_key()

    assert key(inputs) is not None
    assert key(make_inputs(1, 1, 2, 2, 128, 128, 64)) == key(inputs)
    assert key(inputs, AttentionSpec(causal=True)) != key(inputs)
    assert key(inputs, direction="backward") != key(inputs)
    assert key(make_inputs(0, 1, 2, 2, 256, 256, 64)) != key(inputs)
    configured = adapter.configured({"block_q": 64})
    assert key(inputs, adapter=configured) != key(inputs)

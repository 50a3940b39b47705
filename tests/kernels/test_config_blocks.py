"""Each built-in adapter's ``Tunable.blocks`` against its kernel as traced: a config of
non-default blocks shows at every declared place, and the default call (the config dropped)
does not, so the ``config_applied`` check can tell the two apart (``kernels/hardware/lowering.py``'s
``traced_kernels``; ``conformance/judge/checks/config.py``'s ``compare``)."""

from __future__ import annotations

import importlib.util

import jax
import numpy as np
import pytest

from conformance.judge.checks.config import compare
from kernels.contract.tunables import normalize
from kernels.hardware.lowering import abstract_tpu, traced_kernels
from kernels.registry import resolve
from tests.kernels.cases import make_inputs

pytestmark = pytest.mark.timeout(600)

# (subject, config of non-default blocks legal at the inputs' shape, inputs (B, H, Sq, Sk, D), lengths)
CASES = (
    (
        "tpu_flash",
        dict(
            block_q=64,
            block_k_major=256,
            block_b=2,
            block_q_major_dkv=64,
            block_q_dkv=64,
            block_k_major_dkv=256,
            block_k_major_dq=256,
            block_q_dq=64,
        ),
        (2, 1, 256, 256, 128),
        False,
    ),
    # one batch row: [H, S, D] blocks; more: the adapter's vmap adds a batch dimension in front
    *(
        (
            "splash",
            dict(block_q=64, block_kv=256, block_q_dkv=64, block_kv_dkv=256, block_q_dq=64),
            shape,
            False,
        )
        for shape in ((1, 2, 256, 256, 128), (2, 2, 256, 256, 128))
    ),
    # the fused backward needs as many dq row blocks as dk/dv ones
    ("pallas_gpu", dict(block_q=64, block_q_dq=64, block_kv_dkv=64), (1, 2, 256, 256, 64), False),
    ("ragged_paged_attention", dict(num_queries_per_block=8), (2, 4, 32, 256, 128), True),
)


def _traces(adapter, inputs) -> dict:
    """direction -> the pallas_calls of the adapter's call as built for lowering, traced."""
    directions = ("forward", "backward") if adapter.capabilities().backward else ("forward",)
    traces = {}
    for direction in directions:
        call = adapter.lowering(inputs, _spec(), direction)
        with abstract_tpu(call.device_kind):
            traces[direction] = traced_kernels(jax.make_jaxpr(call.fn)(*call.args))
    return traces


def _spec():
    from reference.spec import AttentionSpec

    return AttentionSpec()


def _assert_read_back(tunables, config, applied: dict, dropped: dict) -> None:
    shown = [name for name, _ in config if tunables.get(name).blocks]
    problems, notes = compare(tunables, config, applied)
    assert problems == [] and len(notes) == len(shown), (problems, notes)
    problems, _ = compare(tunables, config, dropped)
    wrong = {p.split("=")[0] for p in problems}
    assert wrong == set(shown), problems  # every declared block tells the default call apart


@pytest.mark.parametrize(("name", "values", "shape", "lengths"), CASES, ids=lambda x: str(x)[:40])
def test_each_declared_block_shows_the_config_and_not_the_default(name, values, shape, lengths):
    adapter = resolve(name)
    if not adapter.availability().available and not adapter.availability().lowerable:
        pytest.skip(adapter.availability().reason)
    b, h, sq, sk, d = shape
    extra = {"q_lengths": np.full(b, sq, np.int32), "kv_lengths": np.full(b, sk, np.int32)} if lengths else {}
    inputs = make_inputs(0, b, h, h, sq, sk, d, **extra)
    tunables = adapter.capabilities().tunables
    config = tunables.normalized(normalize(values))
    assert config == normalize(values)  # every value differs from its default
    _assert_read_back(tunables, config, _traces(adapter.configured(config), inputs), _traces(adapter, inputs))


# tokamax has no Adapter.lowering here: its blocks are read from the call it runs, its JAX call
# (TokamaxAdapter.jax_call, which forward() and gradients() run), under the interpreter it runs in.
# (impl, config, inputs (B, Hq, Hkv, Sq, Sk, D)): Mosaic TPU runs splash's MHA kernels where the
# heads match and its MQA ones (other names, other block ranks) where they do not. The q and kv
# blocks differ, so a place that names q's operand for k's (splash's operands moved at 0.0.14) fails.
MOSAIC_BLOCKS = dict(block_q=256, block_kv=512, block_q_dkv=256, block_kv_dkv=512)
TOKAMAX = (
    ("mosaic_tpu", MOSAIC_BLOCKS, (1, 2, 2, 256, 512, 128)),
    ("mosaic_tpu", MOSAIC_BLOCKS, (1, 2, 1, 256, 512, 128)),
    ("triton", dict(block_q=32, block_m2=32, block_n1=32), (1, 2, 2, 128, 128, 64)),
)


def _tokamax_traces(adapter, inputs) -> dict:
    traces = {}
    for direction, dout in (("forward", None), ("backward", np.zeros(inputs.q.shape, inputs.q.dtype))):
        call = adapter.jax_call(inputs, _spec(), dout)
        with call.context():
            traces[direction] = traced_kernels(jax.jit(call.fn).trace(*call.args).jaxpr)
    return traces


@pytest.mark.skipif(importlib.util.find_spec("tokamax") is None, reason="tokamax is not installed")
@pytest.mark.parametrize(("impl", "values", "shape"), TOKAMAX, ids=lambda x: str(x)[:30])
def test_tokamax_blocks_show_the_config_it_was_given(impl, values, shape):
    adapter = resolve(f"tokamax[impl={impl}]")
    if not adapter.availability().available:
        pytest.skip(adapter.availability().reason)
    b, hq, hkv, sq, sk, d = shape
    inputs = make_inputs(0, b, hq, hkv, sq, sk, d)
    tunables = adapter.capabilities().tunables
    config = normalize(values)
    assert tunables.normalized(config) == config
    applied = _tokamax_traces(adapter.configured(config), inputs)
    _assert_read_back(tunables, config, applied, _tokamax_traces(adapter, inputs))
    if impl == "mosaic_tpu":  # the layout moves the kv block's sequence dimension, as declared
        seq_minor = normalize({**values, "q_layout": "SEQ_MINOR"})
        traced = _tokamax_traces(adapter.configured(seq_minor), inputs)
        assert compare(tunables, seq_minor, traced)[0] == []

"""tokamax's Pallas implementations lowered for their hardware (``TokamaxAdapter.lowering``): Mosaic
TPU for platform tpu, Triton for cuda, with the op and configs the interpreted call runs, and none
of the interpreter's shims."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from kernels.adapters.tokamax import IMPLEMENTATIONS, LOWERS_FOR, TokamaxAdapter, mosaic_tpu_qarray_error
from kernels.hardware.lowering import lower
from reference.spec import AttentionSpec
from tests.kernels.cases import make_inputs

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        importlib.util.find_spec("tokamax") is None, reason="tokamax is not installed (nox installs it)"
    ),
]


def _lowered(adapter, inputs, spec, direction):
    lowering = lower(adapter.lowering(inputs, spec, direction))
    assert lowering.lowered, lowering.error
    return lowering


def test_only_the_pallas_implementations_declare_a_platform_and_the_others_refuse_to_lower():
    declared = {impl: TokamaxAdapter(impl=impl).capabilities().lowers_for for impl in IMPLEMENTATIONS}
    assert declared == {
        "xla": None,
        "xla_chunked": None,
        "mosaic_tpu": "tpu",
        "triton": "cuda",
        "mosaic_gpu": None,
        "cudnn": None,
    }
    assert LOWERS_FOR == {k: v for k, v in declared.items() if v}
    inputs = make_inputs(0, b=1, hq=1, hkv=1, sq=128, sk=128, d=64)
    with pytest.raises(NotImplementedError, match="no Pallas call to lower"):
        TokamaxAdapter(impl="xla").lowering(inputs, AttentionSpec(), "forward")


def test_mosaic_tpu_lowers_to_named_tpu_kernels_with_cost_estimates_and_vmem():
    adapter = TokamaxAdapter(impl="mosaic_tpu")
    inputs = make_inputs(1, b=1, hq=2, hkv=2, sq=256, sk=256, d=128)
    spec = AttentionSpec(causal=True)
    forward = _lowered(adapter, inputs, spec, "forward")
    assert forward.platform == "tpu"
    assert [k.name for k in forward.kernels] == ["splash_mha_fwd_residuals"]  # out and its lse
    (cost,) = (k.cost for k in forward.kernels)
    dense = 2 * 2 * 256 * 256 * (128 + 128)  # B Hq Sq Sk, 2 flops a multiply-add, q.k and p.v
    assert 0 < cost["flops"] <= dense and cost["bytes_accessed"] > 0
    assert forward.footprints and all(fp.total > 0 for fp in forward.footprints)
    backward = _lowered(adapter, inputs, spec, "backward")
    assert any("dkv" in k.name for k in backward.kernels), backward.kernels
    assert all(k.cost.get("flops", 0) > 0 for k in backward.kernels)


def test_mosaic_tpu_lowering_runs_the_cases_config_not_the_default():
    """A larger kv block makes a larger VMEM footprint: the configured op is the one lowered."""
    adapter = TokamaxAdapter(impl="mosaic_tpu")
    inputs = make_inputs(2, b=1, hq=1, hkv=1, sq=256, sk=512, d=128)
    default = _lowered(adapter, inputs, AttentionSpec(), "forward").footprints[0].total
    wide = adapter.configured((("block_kv", 512), ("block_kv_compute", 512)))
    assert _lowered(wide, inputs, AttentionSpec(), "forward").footprints[0].total > default


def test_mosaic_tpu_lowering_is_one_vmapped_kernel_without_the_interpreters_batch_loop():
    adapter = TokamaxAdapter(impl="mosaic_tpu")
    inputs = make_inputs(3, b=3, hq=1, hkv=1, sq=128, sk=128, d=128)
    assert len(_lowered(adapter, inputs, AttentionSpec(), "forward").kernels) == 1


def test_mosaic_tpu_blocks_that_do_not_divide_the_length_do_not_lower_as_declared():
    adapter = TokamaxAdapter(impl="mosaic_tpu")
    inputs = make_inputs(4, b=1, hq=1, hkv=1, sq=113, sk=128, d=128)
    caps = adapter.capabilities()
    outside = caps.admits(inputs.shape, AttentionSpec(), "float32", "forward")
    assert "blocks_divide_lengths" in {e.constraint.name for e in outside}
    lowering = lower(adapter.lowering(inputs, AttentionSpec(), "forward"))
    assert not lowering.lowered and "should divide" in lowering.error


def test_triton_lowers_to_the_triton_custom_call_forward_and_backward():
    adapter = TokamaxAdapter(impl="triton")
    inputs = make_inputs(5, b=2, hq=4, hkv=2, sq=64, sk=128, d=64)
    spec = AttentionSpec(causal=True)  # the causal kernel reads pl.program_id in loop bodies
    forward = _lowered(adapter, inputs, spec, "forward")
    assert forward.platform == "cuda" and not forward.footprints  # no VMEM on a GPU
    assert [k.name for k in forward.kernels] == ["pallas_flash_attention_fwd_res"]
    backward = _lowered(adapter, inputs, spec, "backward")
    assert "pallas_flash_attention_vjp" in [k.name for k in backward.kernels]


def _grids(call) -> list[tuple[int, ...]]:
    import jax

    from kernels.runtime.jax_runtime import _iter_equations

    jaxpr = jax.make_jaxpr(call.fn)(*call.args).jaxpr
    return [
        tuple(e.params["grid_mapping"].grid)
        for e in _iter_equations(jaxpr)
        if e.primitive.name == "pallas_call"
    ]


def test_triton_lowering_runs_the_cases_config():
    """Blocks of 16 instead of the default 64 make four times the q blocks in the lowered grid."""
    inputs = make_inputs(6, b=1, hq=1, hkv=1, sq=64, sk=64, d=32)
    default = TokamaxAdapter(impl="triton")
    small = default.configured((("block_q", 16), ("block_k", 16)))
    (grid,) = _grids(default.lowering(inputs, AttentionSpec(), "forward"))
    (small_grid,) = _grids(small.lowering(inputs, AttentionSpec(), "forward"))
    assert 1 in grid and 4 in small_grid and sorted(grid) != sorted(small_grid), (grid, small_grid)
    assert _lowered(small, inputs, AttentionSpec(), "forward").kernels


def test_lowering_leaves_no_interpreter_context_behind():
    """The lowered call runs outside interpret mode: lowering twice gives the custom call both times,
    and the interpreted call still runs after it."""
    adapter = TokamaxAdapter(impl="mosaic_tpu")
    inputs = make_inputs(7, b=1, hq=1, hkv=1, sq=128, sk=128, d=128)
    for _ in range(2):
        assert _lowered(adapter, inputs, AttentionSpec(), "forward").kernels
    out = adapter.forward(dataclasses.replace(inputs), AttentionSpec()).out
    assert out.shape == inputs.q.shape


def test_tritons_interpreter_limit_binds_the_interpreter_and_not_the_lowered_backward():
    """A window with a partial last backward block fails only in the generic interpreter: declared
    with stage "interpreter", so the lowers check expects it to lower, and it does."""
    from types import SimpleNamespace

    from conformance.judge.checks.hardware import lowers
    from conformance.plan.cases import Case

    adapter = TokamaxAdapter(impl="triton")
    case = Case(adapter.name, "float32", q_len=48, kv_len=48, head_dim=32, v_head_dim=32, window=(4, 4))
    caps = adapter.capabilities()
    inputs = make_inputs(8, b=1, hq=1, hkv=1, sq=48, sk=48, d=32)
    spec = AttentionSpec(window=(4, 4))
    outside = caps.admits(inputs.shape, spec, "float32", "backward", case.features)
    assert [e.constraint.stage for e in outside] == ["interpreter"], outside
    lowerings = {d: lower(adapter.lowering(inputs, spec, d)) for d in ("forward", "backward")}
    ctx = SimpleNamespace(
        case=case, capabilities=caps, backward=True, run=SimpleNamespace(lowering=lowerings.__getitem__)
    )
    outcome = lowers(ctx)
    assert outcome.verdict == "pass", outcome


def test_the_lowered_call_takes_the_quantized_inputs_the_interpreted_call_takes():
    """A quantized case lowers with qwix QArrays, as the interpreted call runs it: Mosaic TPU meets
    'q *= logits_scale' on one (declared, and ledgered as a TypeError), and Triton a dot of int8 q
    and fp8 k weights; lowering plain arrays instead had passed both."""
    inputs = make_inputs(5, b=1, hq=4, hkv=2, sq=128, sk=128, d=64)
    plain = AttentionSpec(causal=True)
    mixed = dataclasses.replace(plain, q_storage="int8_per_tensor", kv_storage="float8_e5m2_per_head")
    mosaic, triton = TokamaxAdapter(impl="mosaic_tpu"), TokamaxAdapter(impl="triton")
    assert lower(mosaic.lowering(inputs, plain, "forward")).lowered
    refused = lower(mosaic.lowering(inputs, mixed, "forward"))
    assert not refused.lowered and mosaic_tpu_qarray_error(q_quantized=True) in refused.error
    assert lower(triton.lowering(inputs, plain, "forward")).lowered
    refused = lower(triton.lowering(inputs, mixed, "forward"))
    assert not refused.lowered and "must have the same element type" in refused.error

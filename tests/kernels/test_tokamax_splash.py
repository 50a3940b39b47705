"""tokamax's splash attention (``tokamax.ops.experimental.splash_attention``), one subject per
implementation: the family name, availability at the installed tokamax, the declarations against
what the API raises, and small cases against the float64 reference (base natively, Mosaic TPU in
TPU interpret mode)."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

from conformance.plan.subjects import impl_names
from kernels.adapters.tokamax_splash import IMPLEMENTATIONS, TokamaxSplashAdapter
from kernels.registry import expand_family, resolve
from kernels.runtime.tokamax_runtime import tokamax_version
from reference.spec import AttentionShape, AttentionSpec
from tests.kernels.cases import check_forward, check_gradients, make_inputs
from tests.support.stand_in_compile import stand_in_compile

pytestmark = pytest.mark.timeout(600)

FAMILY = tuple(f"tokamax_splash[impl={impl}]" for impl in IMPLEMENTATIONS)
PUBLIC = tokamax_version() >= (0, 0, 17) if tokamax_version() else False
needs_public = pytest.mark.skipif(not PUBLIC, reason="tokamax < 0.0.17 has no public splash attention")


def test_the_family_is_both_implementations_and_ci_all_keeps_the_xla_one():
    assert expand_family("tokamax_splash") == FAMILY
    assert resolve("tokamax_splash").name == "tokamax_splash[impl=base]"
    in_ci = impl_names("all", "ci")
    assert "tokamax_splash[impl=base]" in in_ci and "tokamax_splash[impl=mosaic_tpu]" not in in_ci
    assert set(FAMILY) <= set(impl_names("all", "dev"))


@pytest.mark.skipif(importlib.util.find_spec("tokamax") is None, reason="tokamax is not installed")
@pytest.mark.parametrize("name", FAMILY)
def test_availability_follows_the_public_op(name):
    availability = resolve(name).availability()
    if PUBLIC:
        assert availability.available, availability.reason
        expected = "native" if name.endswith("base]") else "interpret"
        assert availability.execution == expected
    else:
        # tokamax 0.0.12 has no tokamax.ops at all: one line, observed by the import
        assert not availability.available
        assert "has no public splash attention" in availability.reason
        assert "\n" not in availability.reason


def test_declarations_mosaic_tpu_declares_its_blocks_and_base_does_not():
    base = TokamaxSplashAdapter("base").capabilities()
    mosaic = TokamaxSplashAdapter("mosaic_tpu").capabilities()
    assert base.q_prescaled and mosaic.q_prescaled  # no scale argument
    # the API documents no fully masked row's value: one reading for the family
    assert base.fully_masked_rows == mosaic.fully_masked_rows == "unspecified"
    assert not base.constraints
    spec = AttentionSpec()
    ok, short = AttentionShape(1, 1, 1, 128, 256, 64, 64), AttentionShape(1, 1, 1, 64, 256, 64, 64)
    assert not mosaic.violated_constraints(ok, spec, "forward")
    (broken,) = mosaic.violated_constraints(short, spec, "forward")
    assert broken.raises and broken.exceptions == ("NotImplementedError",)
    assert not (base.bias or base.lengths) and base.sinks and base.chunked_causal_alignments == ("top_left",)


@needs_public
def test_mosaic_tpu_raises_where_its_blocks_do_not_divide_the_lengths():
    adapter = TokamaxSplashAdapter("mosaic_tpu")
    inputs = make_inputs(0, 1, 1, 1, 64, 128, 64)
    with pytest.raises(ValueError, match="should divide q_seq_len=64"):  # not NotImplementedError: ledger
        adapter.forward(inputs, AttentionSpec())


def _lowered(adapter: TokamaxSplashAdapter, inputs, spec: AttentionSpec, direction: str):
    """The call lowered as the ``lowers`` check lowers it (``conformance/judge/artifacts.py``): an
    adapter raising while it builds the call is a failure to lower."""
    from kernels.hardware.lowering import Lowering, lower

    try:
        call = adapter.lowering(inputs, spec, direction)
    except Exception as error:  # noqa: BLE001 - a kernel rejecting the case while being built
        return Lowering("tpu", f"{type(error).__name__}: {error}")
    return lower(call)


@needs_public
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_mosaic_tpu_lowers_for_a_tpu_with_a_mask_per_batch_row_and_its_vmem_is_read(direction):
    """Forward and backward lower under an abstract TPU, a boolean mask that differs per batch row
    included (its vmap loops over the rows: under an Explicit abstract mesh that raised
    ShardingTypeError, which no device would), and each kernel's VMEM footprint is read from its
    block specs. The kernels are splash's own (``splash_mha_*``), not a fallback."""
    rng = np.random.default_rng(5)
    mask = rng.random((2, 1, 128, 256)) > 0.3
    inputs = make_inputs(0, 2, 4, 2, 128, 256, 64, mask=mask, sinks=rng.standard_normal(4).astype(np.float32))
    adapter = TokamaxSplashAdapter("mosaic_tpu")
    assert adapter.capabilities().lowers_for == "tpu"
    lowering = _lowered(adapter, inputs, AttentionSpec(causal=True, softcap=10.0), direction)
    assert lowering.lowered, lowering.error
    names = [k.name for k in lowering.kernels]
    assert names and all(n.startswith("splash_mha_") for n in names), names
    assert len(names) == (1 if direction == "forward" else 2)
    assert lowering.footprints and all(f.blocks > 0 for f in lowering.footprints)


@needs_public
def test_mosaic_tpu_does_not_lower_where_it_is_declared_to_raise_and_base_has_nothing_to_lower():
    adapter = TokamaxSplashAdapter("mosaic_tpu")
    inputs = make_inputs(0, 1, 1, 1, 64, 128, 64)  # blocks_divide_lengths: 128 does not divide 64
    (declared,) = adapter.capabilities().violated_constraints(inputs.shape, AttentionSpec(), "forward")
    assert declared.name == "blocks_divide_lengths"
    lowering = _lowered(adapter, inputs, AttentionSpec(), "forward")
    assert not lowering.lowered and "should divide" in lowering.error
    base = TokamaxSplashAdapter("base")
    assert base.capabilities().lowers_for is None
    with pytest.raises(NotImplementedError, match="no Pallas call to lower"):
        base.lowering(inputs, AttentionSpec(), "forward")


@needs_public
@pytest.mark.parametrize(
    ("hq", "hkv", "spec", "extra"),
    [
        (4, 2, AttentionSpec(causal=True), {}),  # GQA, top-left
        (2, 1, AttentionSpec(window=(16, 3), alignment="bottom_right"), {}),  # MQA, LocalMask offset
        (2, 2, AttentionSpec(causal=True, chunk=32, softcap=5.0), {"segments": True}),
        (2, 2, AttentionSpec(), {"sinks": True, "mask": True}),  # a boolean mask per head, sinks
    ],
    ids=["gqa_causal", "mqa_window_br", "chunked_softcap_segments", "head_mask_sinks"],
)
def test_base_forward_and_gradients_match_the_reference(hq, hkv, spec, extra):
    rng = np.random.default_rng(3)
    arrays = {}
    if extra.get("sinks"):
        arrays["sinks"] = rng.standard_normal(hq).astype(np.float32)
    if extra.get("mask"):
        arrays["mask"] = rng.random((2, hq, 128, 256)) > 0.3
    inputs = make_inputs(0, 2, hq, hkv, 128, 256, 64, segments=bool(extra.get("segments")), **arrays)
    adapter = TokamaxSplashAdapter("base")
    assert check_forward(adapter, inputs, spec, "float32").startswith("base: XLA ops")
    check_gradients(adapter, inputs, spec, "float32")


@needs_public
def test_mosaic_tpu_forward_in_tpu_interpret_mode_matches_the_reference():
    rng = np.random.default_rng(4)
    inputs = make_inputs(0, 2, 2, 1, 128, 256, 64, sinks=rng.standard_normal(2).astype(np.float32))
    adapter = TokamaxSplashAdapter("mosaic_tpu")
    ran = check_forward(adapter, inputs, AttentionSpec(causal=True, softcap=10.0), "float32")
    assert "pallas_call" in ran and "interpret" in ran and "block_q=128" in ran


@needs_public
def test_its_jax_call_is_the_call_forward_and_gradients_run_and_vmaps_a_mask_per_batch_row():
    """What vmap and sharded transform: the mask is an argument (batch-first, one plane per row
    here), sinks are shared, and the call gives forward's and gradients' answers; vmapped over the
    batch order reversed, each request gets its own rows' answer. Mosaic TPU off a TPU loops over
    the rows in TPU interpret mode, which cannot vmap it: no_vmap says so."""
    import jax
    import jax.numpy as jnp

    from kernels.runtime.tpu_interpret import TPU_INTERPRET_NO_VMAP

    rng = np.random.default_rng(5)
    mask = rng.random((2, 1, 128, 128)) > 0.3
    inputs = make_inputs(0, 2, 2, 1, 128, 128, 64, mask=mask, sinks=rng.standard_normal(2).astype(np.float32))
    spec = AttentionSpec(causal=True)
    adapter = TokamaxSplashAdapter("base")
    call = adapter.jax_call(inputs, spec)
    assert call.no_vmap == "" and call.batched == (True,) * 6 + (False,)  # sinks are shared
    assert call.args[3].shape == (2, 1, 128, 128)  # the mask differs per row: kept per row
    forward = adapter.forward(inputs, spec)
    with call.context():
        out, lse = jax.jit(call.fn)(*call.args)
        stacked = tuple(
            None if a is None else jnp.stack([a, jnp.flip(a, axis=0) if b else a])
            for a, b in zip(call.args, call.batched, strict=True)
        )
        batched_out, _ = jax.jit(jax.vmap(call.fn))(*stacked)
    np.testing.assert_array_equal(np.asarray(out), forward.out)
    np.testing.assert_array_equal(np.asarray(lse), forward.lse)
    np.testing.assert_allclose(np.asarray(batched_out[0]), forward.out, atol=1e-6)
    np.testing.assert_allclose(np.asarray(batched_out[1]), forward.out[::-1], atol=1e-6)
    dout = rng.standard_normal(forward.out.shape).astype(np.float32)
    gradients_call = adapter.jax_call(inputs, spec, dout)
    assert gradients_call.batched[-1] and len(gradients_call.args) == 8
    with gradients_call.context():
        dq, _, _, dsinks = jax.jit(gradients_call.fn)(*gradients_call.args)
    grads = adapter.gradients(inputs, spec, dout)
    np.testing.assert_array_equal(np.asarray(dq), grads.dq)
    np.testing.assert_array_equal(np.asarray(dsinks), grads.dsinks)
    mosaic = TokamaxSplashAdapter("mosaic_tpu")
    if mosaic.availability().execution == "interpret":
        assert mosaic.jax_call(inputs, spec).no_vmap == TPU_INTERPRET_NO_VMAP


@needs_public
def test_bottom_right_causal_runs_top_left_a_ledger_finding():
    """base.py bind turns every CausalMask into Mask(is_causal=True): the offset is dropped."""
    from reference.attention import attention_forward

    inputs = make_inputs(0, 1, 1, 1, 128, 256, 64)
    adapter = TokamaxSplashAdapter("base")
    out = adapter.forward(inputs, AttentionSpec(causal=True, alignment="bottom_right")).out
    top_left = attention_forward(inputs, AttentionSpec(causal=True)).out
    np.testing.assert_allclose(out, top_left, atol=1e-5)


# --- dropout (the dropout check) ------------------------------------------------------------


@needs_public
def test_base_dropout_is_one_mask_per_key_and_batch_row_in_both_directions():
    from kernels.contract.dropout import DropoutRequest

    inputs = make_inputs(0, 2, 2, 2, 128, 128, 64)
    spec = AttentionSpec()
    adapter = TokamaxSplashAdapter(impl="base")
    first, again, other = (adapter.dropout(inputs, spec, DropoutRequest(0.25, seed=s)).out for s in (7, 7, 8))
    assert first.tobytes() == again.tobytes()
    assert not np.array_equal(first, other)
    # each batch row under its own split of the key: the same inputs in both rows, other answers
    twin = make_inputs(0, 1, 2, 2, 128, 128, 64)
    doubled = type(inputs)(*(np.concatenate([x, x]) for x in (twin.q, twin.k, twin.v)))
    rows = adapter.dropout(doubled, spec, DropoutRequest(0.25, seed=7)).out
    assert not np.array_equal(rows[0], rows[1])
    dout = np.ones_like(first)
    grads = adapter.dropout(inputs, spec, DropoutRequest(0.25, seed=7), dout)
    assert grads.dq.shape == inputs.q.shape and np.isfinite(grads.dv).all()


@needs_public
def test_mosaic_tpu_dropout_in_tpu_interpret_mode_raises_the_declared_type_error():
    """The declaration is an observation: when the interpreter runs splash's dropout, this fails and
    the declaration (interpreter_no_dropout) goes."""
    from kernels.contract.dropout import DropoutRequest

    adapter = TokamaxSplashAdapter(impl="mosaic_tpu")
    (declared,) = [c for c in adapter.capabilities().constraints if "dropout" in c.features]
    assert declared.stage == "interpreter" and declared.exceptions == ("TypeError",)
    with pytest.raises(TypeError, match="key<pl>"):
        adapter.dropout(make_inputs(0, 1, 1, 1, 128, 128, 128), AttentionSpec(), DropoutRequest(0.25, seed=0))


# --- the compile cache ----------------------------------------------------------------------


@needs_public
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_compile_serves_calls_equal_but_for_values_and_one_static_option_is_another(monkeypatch, impl):
    """The cache key is the description's (``cache_key``): new values of the same shapes share one
    entry; another softcap, alignment or scale is another, and so is a dropout rate (the key's
    seed is an argument: one entry for two seeds)."""
    from kernels.contract.dropout import DropoutRequest

    stand_in_compile(monkeypatch, outputs=2)
    adapter = TokamaxSplashAdapter(impl=impl)
    inputs, spec = make_inputs(0, 2, 2, 1, 128, 256, 64), AttentionSpec(causal=True)
    adapter.forward(inputs, spec)
    adapter.forward(make_inputs(1, 2, 2, 1, 128, 256, 64), spec)
    assert len(adapter._cache) == 1
    for changed in ({"softcap": 5.0}, {"alignment": "bottom_right"}, {"scale": 0.5}):
        adapter.forward(inputs, dataclasses.replace(spec, **changed))
    assert len(adapter._cache) == 4
    for rate, seed in ((0.25, 7), (0.25, 8), (0.5, 7)):
        adapter.dropout(inputs, spec, DropoutRequest(rate, seed=seed))
    assert len(adapter._cache) == 6

"""Paged attention: the page layout (pure functions) and the kernel against the float64
reference through TPU interpret mode (JAX >= 0.7.0; unavailable with the reason before)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.adapters.paged_attention import (
    INT8_SCALE_DIVISOR,
    PAGE_SIZE,
    SPARE_PAGES,
    PagedAttentionAdapter,
    int8_pages,
    page_table,
    pages_per_sequence,
    scatter_pages,
)
from kernels.registry import resolve
from kernels.runtime.jax_runtime import jax_version
from kernels.runtime.kv_storage import represent
from kernels.runtime.tpu_interpret import TPU_INTERPRET_MODE_SINCE
from reference.attention import attention_forward
from reference.spec import AttentionInputs, AttentionSpec

pytestmark = pytest.mark.timeout(300)


def test_the_table_is_a_shuffled_set_of_distinct_pages_with_spares():
    table, total = page_table(batch=3, width=4, seed=0)
    assert table.shape == (3, 4) and table.dtype == np.int32 and total == 12 + SPARE_PAGES
    assert len(set(table.ravel().tolist())) == 12  # rows share no page
    assert any(np.diff(row).min() < 0 for row in table)  # not monotone


def test_table_width_is_padded_to_whole_compute_blocks():
    assert pages_per_sequence(37, 1) == 3
    assert pages_per_sequence(37, 4) == 4
    assert pages_per_sequence(1, 8) == 8
    assert pages_per_sequence(256, 4) == 16


def test_scatter_puts_each_token_in_its_page_slot_and_garbage_elsewhere():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 37, 8)).astype(np.float32)
    table, total = page_table(2, pages_per_sequence(37, 4), seed=1)
    pages = scatter_pages(x, table, total, seed=2)
    assert pages.shape == (3, total, PAGE_SIZE, 8)
    for b in range(2):
        for t in (0, 15, 16, 36):
            np.testing.assert_array_equal(pages[:, table[b, t // PAGE_SIZE], t % PAGE_SIZE], x[b, :, t])
    tail = pages[:, table[0, 2], 37 % PAGE_SIZE :]  # slots past the row's length
    assert np.isfinite(tail).all() and np.abs(tail).max() > 0


@pytest.fixture(scope="module")
def adapter():
    adapter = PagedAttentionAdapter()
    availability = adapter.availability()
    if not availability.available:
        pytest.skip(f"paged_attention unavailable: {availability.reason}")
    return adapter


def test_unavailable_with_the_reason_before_tpu_interpret_mode():
    availability = PagedAttentionAdapter().availability()
    if jax_version() < TPU_INTERPRET_MODE_SINCE:
        assert not availability.available and "0.7.0" in availability.reason
    else:
        assert availability.available and "TPU interpret mode" in availability.execution_detail


def _decode_inputs(
    seed: int, dtype, b=3, hq=8, hkv=2, sk=96, d=64, lengths=(96, 37, 1), storage=None
) -> AttentionInputs:
    rng = np.random.default_rng(seed)
    cast = lambda x: x.astype(dtype)  # noqa: E731
    stored = lambda x: represent(cast(x), storage)  # noqa: E731
    return AttentionInputs(
        q=cast(rng.standard_normal((b, hq, 1, d))),
        k=stored(rng.standard_normal((b, hkv, sk, d))),
        v=stored(rng.standard_normal((b, hkv, sk, d))),
        kv_lengths=np.asarray(lengths, np.int32),
    )


@pytest.mark.parametrize("config", [(), (("pages_per_compute_block", 1),)])
def test_bfloat16_decode_matches_the_reference_at_each_compute_block(adapter, config):
    import ml_dtypes

    inputs = _decode_inputs(0, ml_dtypes.bfloat16)
    spec = AttentionSpec(softcap=20.0)
    result = adapter.configured(config).forward(inputs, spec)
    expected = attention_forward(inputs, spec).out
    assert result.out.shape == expected.shape and "pages of 16 tokens" in result.ran
    assert np.abs(result.out.astype(np.float64) - expected).max() < 3e-2  # bfloat16 output


def test_float32_output_is_as_accurate_as_bfloat16_kv_and_no_better(adapter):
    """The ledgered finding (paged-attention-float32-kv-rounded-to-bfloat16), measured: against
    K/V rounded to bfloat16 the output is float32-exact; against the given K/V it is not."""
    import ml_dtypes

    inputs = _decode_inputs(1, np.float32)
    out = adapter.forward(inputs, AttentionSpec()).out.astype(np.float64)
    rounded = AttentionInputs(
        q=inputs.q,
        k=inputs.k.astype(ml_dtypes.bfloat16).astype(np.float32),
        v=inputs.v.astype(ml_dtypes.bfloat16).astype(np.float32),
        kv_lengths=inputs.kv_lengths,
    )
    assert np.abs(out - attention_forward(rounded, AttentionSpec()).out).max() < 1e-5
    assert np.abs(out - attention_forward(inputs, AttentionSpec()).out).max() > 1e-4


def test_int8_pages_dequantise_to_exactly_the_given_values_and_refuse_values_off_the_grid():
    x = represent(np.random.default_rng(3).standard_normal((2, 2, 37, 8)).astype(np.float32), "int8")
    table, total = page_table(2, pages_per_sequence(37, 4), seed=1)
    w, scales = int8_pages(x, table, total, seed=2)
    assert (
        w.dtype == np.int8
        and w.shape == (2, total, PAGE_SIZE, 8)
        and scales.shape == (2, total, PAGE_SIZE, 1)
    )
    for b in range(2):
        for t in (0, 16, 36):
            page, slot = table[b, t // PAGE_SIZE], t % PAGE_SIZE
            back = (
                w[:, page, slot].astype(np.float32) * scales[:, page, slot] / np.float32(INT8_SCALE_DIVISOR)
            )
            np.testing.assert_array_equal(back, x[b, :, t])
    with pytest.raises(ValueError, match="kv_storage='int8'"):
        int8_pages(x + np.float32(1e-3), table, total, seed=2)


def test_the_int8_variant_is_an_option_that_declares_its_storage():
    int8 = resolve("paged_attention[kv=int8]")
    assert int8.name == "paged_attention[kv=int8]" and int8.capabilities().kv_storage == "int8"
    assert resolve("paged_attention[kv=float]").name == "paged_attention"
    assert resolve("paged_attention").capabilities().kv_storage is None


def test_int8_pages_give_float32_accuracy_unlike_float32_pages(adapter):
    """The int8 path dequantises into float32 (scale is float32), so it escapes the bfloat16
    rounding of the ledgered finding: the same kernel, float32-accurate on int8 pages."""
    inputs = _decode_inputs(2, np.float32, storage="int8")
    spec = AttentionSpec(softcap=20.0)
    result = resolve("paged_attention[kv=int8]").forward(inputs, spec)
    assert "int8, a scale per token" in result.ran
    assert np.abs(result.out.astype(np.float64) - attention_forward(inputs, spec).out).max() < 1e-5


@pytest.mark.parametrize("mode", ["batch", "kv_head"])
def test_megacore_modes_run_on_two_simulated_cores_and_match(adapter, mode):
    import ml_dtypes

    inputs = _decode_inputs(4, ml_dtypes.bfloat16, b=4, lengths=(96, 0, 37, 1))
    result = adapter.configured({"megacore_mode": mode}).forward(inputs, AttentionSpec())
    assert f"megacore {mode} on 2 cores" in result.ran
    expected = attention_forward(inputs, AttentionSpec()).out
    valid = np.asarray([96, 0, 37, 1]) > 0  # a row of length 0 has no defined output
    assert np.abs(result.out.astype(np.float64) - expected)[valid].max() < 3e-2


def test_megacore_batch_with_an_odd_batch_raises_as_declared(adapter):
    from conformance.plan.cases import Case
    from conformance.plan.catalogue import classify

    case = Case(
        "paged_attention",
        "float32",
        q_len=1,
        batch=3,
        kv_heads=2,
        q_heads=4,
        config={"megacore_mode": "batch"},
    )
    planned = classify("raises", case, adapter.capabilities())
    assert planned.status == "raises" and "megacore_batch_even_batch" in planned.reason
    with pytest.raises(ValueError, match="batch size must be even"):
        adapter.configured({"megacore_mode": "batch"}).forward(_decode_inputs(5, np.float32), AttentionSpec())


@pytest.mark.parametrize("kv", ["float", "int8"])
def test_the_jax_call_shares_the_page_pool_and_is_what_forward_runs(adapter, kv):
    """``jax_call``: q, the lengths and the page table per request, the pages one shared pool (a
    vmapped or sharded batch keeps it whole); run as given it returns ``forward``'s out bitwise."""
    storage = "int8" if kv == "int8" else None
    inputs = _decode_inputs(1, np.float32, storage=storage)
    spec = AttentionSpec(kv_storage=storage)
    call = adapter.jax_call(inputs, spec)
    pages = 4 if kv == "int8" else 2
    assert call.batched == (True, *(False,) * pages, True, True)
    assert call.args[1].shape[0] == 2 and call.args[-1].shape[0] == 3  # [Hkv, P, ...] pages, [B, W] table
    with call.context():
        out, lse = call.fn(*call.args)
    assert lse is None
    assert np.asarray(out).tobytes() == adapter.forward(inputs, spec).out.tobytes()
    with pytest.raises(NotImplementedError, match="no backward"):
        adapter.jax_call(inputs, spec, dout=np.zeros_like(inputs.q))

"""Paged attention: the page layout (pure functions) and the kernel against the float64
reference through TPU interpret mode (JAX >= 0.7.0; unavailable with the reason before)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.jax_runtime import jax_version
from kernels.paged_attention import (
    PAGE_SIZE,
    SPARE_PAGES,
    PagedAttentionAdapter,
    page_table,
    pages_per_sequence,
    scatter_pages,
)
from kernels.tpu_interpret import TPU_INTERPRET_MODE_SINCE
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


def _decode_inputs(seed: int, dtype, b=3, hq=8, hkv=2, sk=96, d=64, lengths=(96, 37, 1)) -> AttentionInputs:
    rng = np.random.default_rng(seed)
    cast = lambda x: x.astype(dtype)  # noqa: E731
    return AttentionInputs(
        q=cast(rng.standard_normal((b, hq, 1, d))),
        k=cast(rng.standard_normal((b, hkv, sk, d))),
        v=cast(rng.standard_normal((b, hkv, sk, d))),
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

"""The reference's answer must not depend on how it splits query rows into chunks.

Chunk boundaries are where row-indexed operands (bias rows, mask rows, q_lengths,
the causal diagonal, segment ids) are easiest to misalign, so each case compares
a one-chunk run with runs cut into uneven chunks, forward and backward.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference import AttentionInputs, AttentionSpec, attention_backward, attention_forward
from reference import attention as attention_module
from tests.reference.assertions import assert_close
from tests.reference.profiles import profiled
from tests.reference.strategies import Case, cases

# Same math, different GEMM shapes and dk/dv/dbias accumulation order: a few ulps.
RTOL = 1e-13


def run_chunked(case: Case, chunk_elements: int) -> tuple[object, object, list[int]]:
    """Forward and backward with CHUNK_ELEMENTS patched; also the row counts of the chunks seen."""
    seen: list[int] = []
    logits = attention_module._Blocks.logits

    def spy(self, rows: slice):
        seen.append(rows.stop - rows.start)
        return logits(self, rows)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(attention_module, "CHUNK_ELEMENTS", chunk_elements)
        mp.setattr(attention_module._Blocks, "logits", spy)
        fwd = attention_forward(case.inputs, case.spec)
        grads = attention_backward(case.inputs, case.dout, case.spec, fwd)
    return fwd, grads, seen


def assert_chunking_invariant(case: Case, rows: int) -> None:
    s = case.shape
    whole = run_chunked(case, s.group_size * s.kv_len * s.q_len)
    cut = run_chunked(case, s.group_size * s.kv_len * rows)
    # Guard: the patch really changed the chunking (else this test could not fail).
    assert set(whole[2]) == {s.q_len}
    assert max(cut[2]) == min(rows, s.q_len), f"asked for {rows}-row chunks, got {sorted(set(cut[2]))}"
    (f0, g0, _), (f1, g1, _) = whole, cut
    np.testing.assert_array_equal(f1.fully_masked, f0.fully_masked, err_msg="fully_masked")
    assert_close(f1.out, f0.out, RTOL, "out")
    assert_close(f1.lse, f0.lse, RTOL, "lse")
    for name in ("dq", "dk", "dv", "dbias"):
        if getattr(g0, name) is None:
            assert getattr(g1, name) is None
        else:
            assert_close(getattr(g1, name), getattr(g0, name), RTOL, name)


@profiled(60)
@given(cases(), st.data())
def test_small_cases_do_not_depend_on_chunk_rows(case: Case, data: st.DataObject) -> None:
    assert_chunking_invariant(case, data.draw(st.integers(1, case.shape.q_len), label="rows per chunk"))


def test_one_element_chunks_still_take_a_whole_row() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 3)) for _ in range(3))
    case = Case(AttentionSpec(causal=True), AttentionInputs(q=q, k=k, v=v), rng.standard_normal((1, 2, 5, 3)))
    f0, g0, _ = run_chunked(case, 1 << 30)
    f1, g1, seen = run_chunked(case, 1)
    assert set(seen) == {1}
    assert_close(f1.out, f0.out, RTOL, "out")
    assert_close(g1.dk, g0.dk, RTOL, "dk")


@pytest.mark.parametrize("rows", [1, 7, 128, 250])
def test_a_larger_case_with_every_row_indexed_feature(rows: int) -> None:
    """Hundreds of rows, uneven last chunk, every operand that is indexed by query row."""
    rng = np.random.default_rng(rows)
    b, hq, hkv, sq, sk, d, dv = 2, 4, 2, 300, 96, 8, 4
    inputs = AttentionInputs(
        q=rng.standard_normal((b, hq, sq, d)),
        k=rng.standard_normal((b, hkv, sk, d)),
        v=rng.standard_normal((b, hkv, sk, dv)),
        bias=rng.standard_normal((1, hq, sq, sk)),
        q_segment_ids=np.sort(rng.integers(0, 3, size=(b, sq)), axis=1),
        kv_segment_ids=np.sort(rng.integers(0, 3, size=(b, sk)), axis=1),
        q_lengths=np.array([sq, 211]),
        kv_lengths=np.array([90, sk]),
        mask=rng.random((b, 1, sq, sk)) < 0.9,
    )
    spec = AttentionSpec(causal=True, alignment="bottom_right", window=(60, None), softcap=5.0)
    case = Case(spec, inputs, rng.standard_normal((b, hq, sq, dv)))
    assert_chunking_invariant(case, rows)

"""The boolean-mask fallback for chunked causal attention (``kernels/runtime/chunked_mask.py``) against the
reference's visibility, written apart from it, at every alignment and the chunk edges."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.runtime.chunked_mask import as_mask, chunk_plane
from reference.masks import full_visibility
from reference.spec import AttentionInputs, AttentionSpec


def _inputs(b: int, sq: int, sk: int, **fields) -> AttentionInputs:
    return AttentionInputs(
        q=np.zeros((b, 2, sq, 1)), k=np.zeros((b, 1, sk, 1)), v=np.zeros((b, 1, sk, 1)), **fields
    )


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right", "bottom_right_valid"])
@pytest.mark.parametrize("sq, sk", [(7, 7), (5, 11), (11, 5), (1, 9)])
@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 16])
def test_the_folded_mask_is_the_reference_visibility(alignment, sq, sk, chunk):
    lengths = dict(q_lengths=np.array([sq, max(sq - 2, 0)]), kv_lengths=np.array([sk, max(sk - 3, 0)]))
    inputs = _inputs(2, sq, sk, **lengths)
    spec = AttentionSpec(causal=True, alignment=alignment, chunk=chunk)
    folded, plain = as_mask(inputs, spec)
    assert plain.chunk is None and plain.causal and plain.alignment == alignment
    np.testing.assert_array_equal(full_visibility(plain, folded), full_visibility(spec, inputs))


def test_the_case_mask_is_anded_in_and_other_cases_pass_through():
    mask = np.random.default_rng(0).random((1, 2, 6, 6)) > 0.3
    inputs = _inputs(1, 6, 6, mask=mask)
    spec = AttentionSpec(causal=True, chunk=4)
    folded, _ = as_mask(inputs, spec)
    np.testing.assert_array_equal(folded.mask[0], chunk_plane(6, 6, 0, 4)[None] & mask[0])
    assert as_mask(inputs, AttentionSpec(causal=True)) == (inputs, AttentionSpec(causal=True))


def test_a_negative_diagonal_sees_nothing():
    assert not chunk_plane(4, 2, -3, 2)[:2].any()

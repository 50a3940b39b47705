"""``Capabilities.admits``: the one predicate for "is this case inside the declaration?"."""

from __future__ import annotations

from kernels.contract.base import Capabilities, Exclusion, ShapeConstraint
from reference.spec import AttentionShape, AttentionSpec
from tests.kernels.cases import make_inputs

EVEN_RAISES = ShapeConstraint(
    "even_q",
    "an odd query length raises ValueError in the kernel",
    lambda shape, spec: shape.q_len % 2 == 0,
    basis="raises",
)
NO_LONG_KV = ShapeConstraint(
    "short_kv",
    "the call has no parameter for a key length above 16",
    lambda shape, spec: shape.kv_len <= 16,
    basis="api",
    applies_to="forward",
)
BACKWARD_128 = ShapeConstraint(
    "bwd_128",
    "the backward raises ValueError unless the query length is a multiple of 128",
    lambda shape, spec: shape.q_len % 128 == 0,
    basis="raises",
    applies_to="backward",
)
CAPS = Capabilities(dtypes=("float32",), backward=True, constraints=(EVEN_RAISES, NO_LONG_KV, BACKWARD_128))


def test_a_case_inside_the_declaration_is_admitted() -> None:
    inputs = make_inputs(0, 1, 2, 2, 128, 8, 4)
    assert CAPS.admits(inputs, AttentionSpec(), "float32", "forward") == ()
    assert CAPS.admits(inputs, AttentionSpec(), "float32", "backward") == ()
    assert CAPS.admits(inputs.shape, AttentionSpec(), "float32", "forward") == ()


def test_every_reason_is_returned_not_only_the_first() -> None:
    # float16 (undeclared), GQA (undeclared), a softcap (undeclared), an odd Sq (raises)
    # and a long Sk (api): five things wrong, five reasons, declarations first (in the feature
    # table's order, kernels/contract/features.py).
    inputs = make_inputs(0, 1, 4, 2, 7, 32, 4)
    outside = CAPS.admits(inputs, AttentionSpec(softcap=5.0), "float16", "forward")
    assert [e.text for e in outside] == [
        "dtype float16 not in ('float32',)",
        "softcap not supported",
        "GQA/MQA not supported",
        "even_q: an odd query length raises ValueError in the kernel",
        "short_kv: the call has no parameter for a key length above 16",
    ]
    assert [e.constraint for e in outside] == [None, None, None, EVEN_RAISES, NO_LONG_KV]
    assert [e.raises for e in outside] == [False, False, False, True, False]
    assert all(isinstance(e, Exclusion) and str(e) == e.text for e in outside)


def test_three_broken_things_give_three_reasons() -> None:
    inputs = make_inputs(0, 1, 1, 1, 32, 32, 4)  # Sk = 32 breaks short_kv; Sq = Sk keeps the window put
    outside = CAPS.admits(inputs, AttentionSpec(window=(1, 1)), "bfloat16", "forward")
    assert [e.text for e in outside] == [
        "dtype bfloat16 not in ('float32',)",
        "local window not supported",
        "short_kv: the call has no parameter for a key length above 16",
    ]


def test_direction_selects_the_constraints_and_the_backward_declaration() -> None:
    shape = AttentionShape(1, 1, 1, 6, 32, 8, 8)
    forward = CAPS.admits(shape, AttentionSpec(), "float32", "forward")
    backward = CAPS.admits(shape, AttentionSpec(), "float32", "backward")
    assert [e.constraint for e in forward] == [NO_LONG_KV]  # forward-only api constraint
    assert [e.constraint for e in backward] == [BACKWARD_128]
    assert backward[0].raises
    no_backward = Capabilities(dtypes=("float32",))
    assert [e.text for e in no_backward.admits(shape, AttentionSpec(), "float32", "backward")] == [
        "backward pass not declared"
    ]


def test_the_older_questions_are_views_of_admits() -> None:
    inputs = make_inputs(0, 1, 4, 2, 7, 32, 4)
    spec = AttentionSpec(softcap=5.0)
    assert CAPS.unsupported_reason(inputs, spec, "float16") == "dtype float16 not in ('float32',)"
    assert CAPS.violated_constraints(inputs.shape, spec, "forward") == (EVEN_RAISES, NO_LONG_KV)
    assert CAPS.violated_constraints(inputs.shape, spec, "backward") == (EVEN_RAISES, BACKWARD_128)


def test_a_bare_shape_cannot_show_input_features() -> None:
    with_bias = make_inputs(0, 1, 2, 2, 8, 8, 4, bias_shape=(1, 2, 8, 8))
    assert [e.text for e in CAPS.admits(with_bias, AttentionSpec(), "float32", "forward")] == [
        "bias not supported"
    ]
    assert CAPS.admits(with_bias.shape, AttentionSpec(), "float32", "forward") == ()


def test_a_subject_broadcasting_only_over_batch_and_heads_rejects_a_bias_or_mask_broadcast_over_lengths():
    """cuDNN takes a bias (and a mask, folded into it) whole along Sq and Sk."""
    import dataclasses

    import numpy as np

    from kernels.contract.base import Capabilities
    from reference.spec import AttentionSpec
    from tests.kernels.cases import make_inputs

    caps = Capabilities(
        dtypes=("float16",), bias=True, bias_broadcast=True, bool_mask=True, broadcast_dims=("batch", "heads")
    )
    base = make_inputs(0, b=2, hq=2, hkv=2, sq=8, sk=8, d=8)
    whole = dataclasses.replace(base, bias=np.zeros((1, 2, 8, 8), np.float32))
    over_q = dataclasses.replace(base, bias=np.zeros((2, 1, 1, 8), np.float32))
    mask_over_q = dataclasses.replace(base, mask=np.ones((2, 1, 1, 8), bool))
    assert caps.unsupported_reason(whole, AttentionSpec(), "float16") is None
    for inputs in (over_q, mask_over_q):
        reason = caps.unsupported_reason(inputs, AttentionSpec(), "float16")
        assert reason == "bias or mask broadcast over q, kv not supported (only over batch, heads)"
    assert (
        Capabilities(dtypes=("float16",), bias=True, bias_broadcast=True).unsupported_reason(
            over_q, AttentionSpec(), "float16"
        )
        is None
    )

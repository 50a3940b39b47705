"""Properties any correct attention has, checked on the reference over hypothesis-drawn cases.

Each property compares the reference with itself under a transformation whose effect
the semantics fix exactly, so none of them trusts a second implementation.
"""

from __future__ import annotations

import dataclasses
from random import Random

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from reference import ReferenceGrads, ReferenceOutput, attention_backward, attention_forward
from tests.reference.assertions import assert_close
from tests.reference.profiles import profiled
from tests.reference.prose_masks import visibility
from tests.reference.strategies import Case, cases, shapes

# Both sides are float64 runs of the same math in a different order (summation,
# GEMM grouping), so they agree to a few ulps; O(1e-3) is what a slip looks like.
RTOL = 1e-12


def run(case: Case) -> tuple[ReferenceOutput, ReferenceGrads]:
    fwd = attention_forward(case.inputs, case.spec)
    return fwd, attention_backward(case.inputs, case.dout, case.spec, fwd)


def assert_same(a: Case, b: Case, *, dbias: bool = True) -> None:
    """Two cases that the semantics say are the same computation give the same results."""
    (fa, ga), (fb, gb) = run(a), run(b)
    np.testing.assert_array_equal(fa.fully_masked, fb.fully_masked, err_msg="fully_masked")
    assert_close(fa.out, fb.out, RTOL, "out")
    assert_close(fa.lse, fb.lse, RTOL, "lse")
    for name in ("dq", "dk", "dv") + (("dbias",) if dbias else ()):
        x, y = getattr(ga, name), getattr(gb, name)
        if x is None or y is None:
            assert x is None and y is None, f"{name}: one side has no gradient"
        else:
            assert_close(x, y, RTOL, name)


def full_bias(case: Case) -> np.ndarray:
    s = case.shape
    full = (s.batch, s.q_heads, s.q_len, s.kv_len)
    bias = case.inputs.bias
    return np.zeros(full) if bias is None else np.broadcast_to(bias, full).copy()


def bake_positional(case: Case) -> Case:
    """Turn causal, chunk, window and kv_lengths (which depend on key positions) into a boolean mask.
    q_lengths stay in the baked case and in the probe: bottom-right-valid places each row's
    diagonal by them, and the rows past them are masked in both anyway."""
    positional_only = dataclasses.replace(
        case.inputs, q_segment_ids=None, kv_segment_ids=None, mask=None, bias=None
    )
    mask = visibility(case.spec, positional_only)
    if case.inputs.mask is not None:
        mask &= case.inputs.mask
    return case.replace(
        spec=dataclasses.replace(case.spec, causal=False, window=None, chunk=None), kv_lengths=None, mask=mask
    )


@profiled(60)
@given(cases(), st.randoms(use_true_random=False))
def test_permuting_keys_with_their_values_changes_nothing(case: Case, random: Random) -> None:
    baked = bake_positional(case)
    assert_same(case, baked)  # the positional masks are exactly their prose visibility
    perm = np.array(random.sample(range(case.shape.kv_len), case.shape.kv_len))
    inp = baked.inputs

    def cols(x: np.ndarray | None) -> np.ndarray | None:
        return x if x is None or x.shape[-1] == 1 else x[..., perm]

    permuted = baked.replace(
        k=inp.k[:, :, perm],
        v=inp.v[:, :, perm],
        kv_segment_ids=cols(inp.kv_segment_ids),
        mask=cols(inp.mask),
        bias=cols(inp.bias),
    )
    (f0, g0), (f1, g1) = run(baked), run(permuted)
    np.testing.assert_array_equal(f0.fully_masked, f1.fully_masked)
    assert_close(f1.out, f0.out, RTOL, "out")
    assert_close(f1.lse, f0.lse, RTOL, "lse")
    assert_close(g1.dq, g0.dq, RTOL, "dq")
    assert_close(g1.dk, g0.dk[:, :, perm], RTOL, "dk")
    assert_close(g1.dv, g0.dv[:, :, perm], RTOL, "dv")
    if g0.dbias is not None:
        assert_close(g1.dbias, cols(g0.dbias), RTOL, "dbias")


@profiled(60)
@given(cases(bias=False))
def test_equal_logits_give_the_mean_of_the_visible_values(case: Case) -> None:
    case = case.replace(q=np.zeros_like(case.inputs.q))
    s = case.shape
    vis = visibility(case.spec, case.inputs)
    count = vis.sum(axis=-1)  # [B, Hq, Sq]
    kv_of_head = np.arange(s.q_heads) // s.group_size
    v = case.inputs.v[:, kv_of_head]  # [B, Hq, Sk, Dv]
    weights = vis / np.maximum(count, 1)[..., None]
    fwd, grads = run(case)
    assert_close(fwd.out, weights @ v, RTOL, "out")
    with np.errstate(divide="ignore"):
        assert_close(fwd.lse, np.log(count), RTOL, "lse")
    dv = np.zeros_like(case.inputs.v)
    np.add.at(dv, (slice(None), kv_of_head), np.swapaxes(weights, -1, -2) @ case.dout)
    assert_close(grads.dv, dv, RTOL, "dv")


@profiled(60)
@given(cases(positional=False, segments=False, lengths=False, mask=False, neg_inf_bias=False), st.data())
def test_a_single_allowed_key_gives_that_keys_value_row(case: Case, data: st.DataObject) -> None:
    s = case.shape
    rows = (s.batch, s.q_heads, s.q_len)
    pick = np.array(
        data.draw(
            st.lists(st.integers(0, s.kv_len - 1), min_size=int(np.prod(rows)), max_size=int(np.prod(rows)))
        )
    ).reshape(rows)
    mask = np.arange(s.kv_len) == pick[..., None]
    case = case.replace(mask=mask)
    b, h, i = np.indices(rows)
    kvh = h // s.group_size
    logit = np.sum(case.inputs.q * case.inputs.k[b, kvh, pick], axis=-1) * case.spec.resolved_scale(
        s.head_dim
    )
    logit += full_bias(case)[b, h, i, pick]
    if case.spec.softcap is not None:
        logit = case.spec.softcap * np.tanh(logit / case.spec.softcap)
    fwd, grads = run(case)
    assert_close(fwd.out, case.inputs.v[b, kvh, pick], RTOL, "out")
    assert_close(fwd.lse, logit, RTOL, "lse")
    # A one-key softmax is constant 1: nothing but v gets a gradient.
    assert_close(grads.dq, np.zeros_like(grads.dq), RTOL, "dq")
    assert_close(grads.dk, np.zeros_like(grads.dk), RTOL, "dk")
    if grads.dbias is not None:
        assert_close(grads.dbias, np.zeros_like(grads.dbias), RTOL, "dbias")
    dv = np.zeros_like(case.inputs.v)
    np.add.at(dv, (b, kvh, pick), case.dout)
    assert_close(grads.dv, dv, RTOL, "dv")


@profiled(60)
@given(cases())
def test_gqa_equals_repeated_kv_heads(case: Case) -> None:
    s = case.shape
    g = s.group_size
    repeated = case.replace(k=np.repeat(case.inputs.k, g, axis=1), v=np.repeat(case.inputs.v, g, axis=1))
    (f0, g0), (f1, g1) = run(case), run(repeated)
    np.testing.assert_array_equal(f0.fully_masked, f1.fully_masked)
    assert_close(f0.out, f1.out, RTOL, "out")
    assert_close(f0.lse, f1.lse, RTOL, "lse")
    assert_close(g0.dq, g1.dq, RTOL, "dq")
    group_sum = (s.batch, s.kv_heads, g, s.kv_len)
    assert_close(g0.dk, g1.dk.reshape(*group_sum, -1).sum(axis=2), RTOL, "dk")
    assert_close(g0.dv, g1.dv.reshape(*group_sum, -1).sum(axis=2), RTOL, "dv")
    if g0.dbias is not None:
        assert_close(g0.dbias, g1.dbias, RTOL, "dbias")


@profiled(60)
@given(cases(neg_inf_bias=False), st.integers(0, 2**32 - 1))
def test_a_neg_inf_bias_equals_a_mask(case: Case, seed: int) -> None:
    s = case.shape
    allowed = np.random.default_rng(seed).random((s.batch, s.q_heads, s.q_len, s.kv_len)) < 0.6
    bias = full_bias(case)
    old_mask = case.inputs.mask
    as_mask = case.replace(bias=bias, mask=allowed if old_mask is None else allowed & old_mask)
    as_bias = case.replace(bias=np.where(allowed, bias, -np.inf))
    assert_same(as_mask, as_bias)


@profiled(60)
@given(cases(segments=False), st.integers(0, 2**32 - 1), st.integers(1, 3))
def test_segment_ids_equal_the_block_diagonal_mask(case: Case, seed: int, ids: int) -> None:
    s = case.shape
    rng = np.random.default_rng(seed)
    q_ids = rng.integers(0, ids, size=(s.batch, s.q_len))
    kv_ids = rng.integers(0, ids, size=(s.batch, s.kv_len))
    block = (q_ids[:, None, :, None] == kv_ids[:, None, None, :]) & True
    if case.inputs.mask is not None:
        block = block & case.inputs.mask
    assert_same(case.replace(q_segment_ids=q_ids, kv_segment_ids=kv_ids), case.replace(mask=block))


@st.composite
def square_shapes(draw: st.DrawFn):
    s = draw(shapes())
    return dataclasses.replace(s, kv_len=s.q_len)


@profiled(60)
@given(cases(shape=square_shapes()))
def test_top_left_equals_bottom_right_when_sq_equals_sk(case: Case) -> None:
    assume(case.spec.alignment != "bottom_right_valid")  # its own property follows
    other = "top_left" if case.spec.alignment == "bottom_right" else "bottom_right"
    assert_same(case, case.replace(spec=dataclasses.replace(case.spec, alignment=other)))


@profiled(60)
@given(cases(positional=True))
def test_bottom_right_valid_equals_bottom_right_at_the_tensor_lengths(case: Case) -> None:
    """Valid lengths equal to the tensor lengths put every row's diagonal at Sk - Sq."""
    s = case.shape
    full = case.replace(q_lengths=np.full(s.batch, s.q_len), kv_lengths=np.full(s.batch, s.kv_len))
    valid = full.replace(spec=dataclasses.replace(case.spec, alignment="bottom_right_valid"))
    assert_same(full.replace(spec=dataclasses.replace(case.spec, alignment="bottom_right")), valid)


@profiled(60)
@given(cases(softcap=False))
def test_a_huge_softcap_is_the_identity(case: Case) -> None:
    # c * tanh(s / c) = s - s^3 / (3 c^2): at c = 1e12 that is far below an ulp of s.
    capped = case.replace(spec=dataclasses.replace(case.spec, softcap=1e12))
    assert_same(case, capped)


@st.composite
def cases_with_dead_rows(draw: st.DrawFn) -> tuple[Case, np.ndarray]:
    """A case with at least one fully masked row (killed through the mask if need be)."""
    case = draw(cases())
    s = case.shape
    rows = (s.batch, s.q_heads, s.q_len)
    kill = np.zeros(rows, dtype=bool)
    kill[tuple(draw(st.integers(0, n - 1)) for n in rows)] = True
    kill |= np.array(draw(st.lists(st.booleans(), min_size=kill.size, max_size=kill.size))).reshape(rows)
    mask = np.broadcast_to(~kill[..., None], (*rows, s.kv_len))
    if case.inputs.mask is not None:
        mask = mask & case.inputs.mask
    case = case.replace(mask=mask)
    return case, ~visibility(case.spec, case.inputs).any(axis=-1)


@profiled(60)
@given(cases_with_dead_rows(), st.integers(0, 2**32 - 1))
def test_fully_masked_rows_are_zero_flagged_and_inert(case_dead: tuple[Case, np.ndarray], seed: int) -> None:
    case, dead = case_dead
    rng = np.random.default_rng(seed)
    fwd, grads = run(case)
    np.testing.assert_array_equal(fwd.fully_masked, dead, err_msg="fully_masked flags")
    assert np.all(fwd.out[dead] == 0), "out must be 0 on fully masked rows"
    assert np.all(fwd.lse[dead] == -np.inf), "lse must be -inf on fully masked rows"
    assert np.all(grads.dq[dead] == 0), "fully masked rows have no dq"

    # Whatever sits in a dead row (q, dout) must not reach any other output or gradient.
    # The results must be bitwise equal: the dead rows contribute exact zeros.
    q = case.inputs.q.copy()
    q[dead] = 1e3 * rng.standard_normal(q[dead].shape)
    dout = case.dout.copy()
    dout[dead] = 1e3 * rng.standard_normal(dout[dead].shape)
    f1, g1 = run(case.replace(q=q, dout=dout))
    live = ~dead
    np.testing.assert_array_equal(f1.out[live], fwd.out[live], err_msg="out of live rows")
    np.testing.assert_array_equal(f1.lse, fwd.lse, err_msg="lse")
    np.testing.assert_array_equal(g1.dq[live], grads.dq[live], err_msg="dq of live rows")
    assert np.all(g1.dq[dead] == 0)
    for name in ("dk", "dv", "dbias"):
        np.testing.assert_array_equal(getattr(g1, name), getattr(grads, name), err_msg=name)

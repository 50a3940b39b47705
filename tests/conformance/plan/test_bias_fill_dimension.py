"""-inf and large negatives in an additive bias as a case dimension (``BIAS_FILL``): ids, where
the fill goes and what it writes, fully masked rows, declarations (softcap's order, a subject
that raises), draws, pairwise edits, user cases, curated cases, repro scripts, and a NaN
gradient where the reference is finite."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from conformance.judge.artifacts import Oracle
from conformance.judge.checks import numeric
from conformance.judge.checks.base import CheckContext
from conformance.judge.inputs import build_inputs, script_draws
from conformance.plan import edge_matrix, profiles, strategies
from conformance.plan.cases import Case
from conformance.plan.catalogue import has_fully_masked_rows
from conformance.plan.user_cases import CaseSyntaxError, parse_case
from kernels.contract import features
from kernels.contract.base import Capabilities, ShapeConstraint, SubjectGrads
from kernels.contract.tunables import Tunable, Tunables
from reference.attention import attention_forward
from tests.support.fakes import FULL

FIRST = Case("a", "float32", bias="bhqk", bias_fill="first_block", bias_fill_block=128, q_len=64, kv_len=256)
BIAS = Capabilities(dtypes=("float32", "bfloat16", "float16"), bias=True, bias_broadcast=True, softcap=True)


def test_the_case_id_words_and_grid_name_the_fill():
    assert FIRST.case_id == "a-float32-bias_bhqk-fill_first128_ninf-B1-Hq1-Hkv1-Sq64-Sk256-D64"
    assert "bias_neg_inf" in FIRST.features and "bias" in FIRST.features
    finite = dataclasses.replace(FIRST, bias_fill="row", bias_fill_value="-1e9")
    assert "-fill_row_m1e9-" in finite.case_id and "bias_large_negative" in finite.features
    assert "bias -inf over the first 128-key block" in FIRST.words()
    assert "bias_fill" not in "".join(dataclasses.replace(FIRST, bias_fill=None).features)


def test_a_fill_needs_a_bias_and_known_names():
    with pytest.raises(ValueError, match="bias_fill needs a bias"):
        Case("a", "float32", bias_fill="row")
    with pytest.raises(ValueError, match="unknown bias_fill 'middle'"):
        Case("a", "float32", bias="bhqk", bias_fill="middle")
    with pytest.raises(ValueError, match="unknown bias_fill_value '-1e30'"):
        Case("a", "float32", bias="bhqk", bias_fill="row", bias_fill_value="-1e30")


def test_each_place_covers_what_it_names():
    first = np.isneginf(build_inputs(FIRST).bias)
    assert first[..., :128].all() and not first[..., 128:].any()
    last = dataclasses.replace(FIRST, bias_fill="last_block", kv_len=200)
    fill = np.isneginf(build_inputs(last).bias)
    assert fill[..., 128:].all() and not fill[..., :128].any()  # the partial last block, 72 keys
    row = np.isneginf(build_inputs(dataclasses.replace(FIRST, bias_fill="row")).bias)
    assert row[0, 0, 32].all() and row.sum() == 256
    scattered = np.isneginf(build_inputs(dataclasses.replace(FIRST, bias_fill="scattered")).bias)
    assert 0.15 < scattered.mean() < 0.35
    # The same positions in every subject and salt (a structure, like a mask); fresh values elsewhere.
    again = build_inputs(dataclasses.replace(FIRST, subject="b", bias_fill="scattered"), salt=1).bias
    np.testing.assert_array_equal(np.isneginf(again), scattered)


def test_a_broadcast_bias_is_filled_in_its_own_shape():
    no_rows = dataclasses.replace(FIRST, bias="111k", bias_fill="row")
    assert np.isneginf(build_inputs(no_rows).bias).all()  # its one row is every row
    assert has_fully_masked_rows(no_rows)


def test_each_value_survives_the_cast_to_the_dtype():
    def value(dtype: str, fill: str) -> float:
        case = dataclasses.replace(FIRST, dtype=dtype, bias_fill_value=fill)
        return float(np.asarray(build_inputs(case).bias, dtype=np.float64)[0, 0, 0, 0])

    assert value("float32", "-inf") == -np.inf
    assert value("float32", "-1e9") == -1e9
    assert value("float32", "min") == float(np.finfo(np.float32).min)
    assert value("float16", "-1e9") == value("float16", "min") == -65504.0  # -1e9 is out of its range
    assert value("bfloat16", "min") == -3.3895313892515355e38


def test_a_whole_row_of_neg_inf_is_fully_masked_a_finite_one_is_not():
    row = dataclasses.replace(FIRST, bias_fill="row")
    assert has_fully_masked_rows(row) and not has_fully_masked_rows(FIRST)
    ref = attention_forward(build_inputs(row), row.spec)
    assert ref.fully_masked[0, 0, 32] and ref.fully_masked.sum() == 1
    finite = dataclasses.replace(row, bias_fill_value="-1e9")
    assert not has_fully_masked_rows(finite)
    assert not attention_forward(build_inputs(finite), finite.spec).fully_masked.any()


def test_neg_inf_masks_under_softcap_in_the_reference_a_finite_fill_is_capped():
    capped = dataclasses.replace(FIRST, softcap=5.0)
    inputs = build_inputs(capped)
    masked = attention_forward(inputs, capped.spec)
    cut = dataclasses.replace(
        inputs, k=inputs.k[:, :, 128:], v=inputs.v[:, :, 128:], bias=inputs.bias[..., 128:]
    )
    np.testing.assert_allclose(masked.out, attention_forward(cut, capped.spec).out, rtol=1e-12)
    finite = dataclasses.replace(capped, bias_fill_value="-1e9")
    out = attention_forward(build_inputs(finite), finite.spec).out
    assert np.abs(out - masked.out).max() > 1e-3  # -1e9 is capped to -5: those keys keep a weight


def test_a_cap_after_bias_subject_declares_neg_inf_under_softcap_unsupported():
    caps = dataclasses.replace(BIAS, softcap_neg_inf_bias="caps")
    capped = dataclasses.replace(FIRST, softcap=5.0)
    reasons = [e.text for e in caps.admits(capped.skeleton(), capped.spec, "float32", "forward")]
    assert len(reasons) == 1 and "capped to -softcap here, not masked" in reasons[0]
    for case in (FIRST, dataclasses.replace(capped, bias_fill_value="-1e9")):  # no softcap; finite
        assert caps.admits(case.skeleton(), case.spec, "float32", "forward") == ()
    assert BIAS.admits(capped.skeleton(), capped.spec, "float32", "forward") == ()


def test_a_subject_that_rejects_neg_inf_declares_a_raises_constraint_on_the_grid_column():
    rejects = ShapeConstraint(
        "no_neg_inf_bias",
        "ValueError on -inf",
        lambda shape, spec: False,
        "raises",
        features=("bias_neg_inf",),
    )
    caps = dataclasses.replace(BIAS, constraints=(rejects,))
    (exclusion,) = caps.admits(FIRST.skeleton(), FIRST.spec, "float32", "forward", FIRST.features)
    assert exclusion.raises
    finite = dataclasses.replace(FIRST, bias_fill_value="min")
    assert caps.admits(finite.skeleton(), finite.spec, "float32", "forward", finite.features) == ()


def test_the_block_is_the_subjects_default_kv_block_or_128():
    assert features.subject_kv_block(BIAS) == 128
    tuned = dataclasses.replace(BIAS, tunables=Tunables((Tunable("block_k", 64, "kv"),)))
    assert features.subject_kv_block(tuned) == 64
    template = Case("", "", bias="bhqk", bias_fill="first_block")
    assert features.for_subject(template, tuned) == {"bias_fill_block": 64}
    assert features.for_subject(FIRST, tuned) == {}  # a block already set stays
    with pytest.raises(ValueError, match="bias_fill_block is 0"):
        build_inputs(dataclasses.replace(template, subject="a", dtype="float32"))


def test_user_cases_take_a_fill():
    case = parse_case("bias=bhqk,bias_fill=last_block:min:64", ("float32",))
    assert (case.bias_fill, case.bias_fill_value, case.bias_fill_block) == ("last_block", "min", 64)
    assert parse_case("bias=1h1k,bias_fill=row", ("float32",)).bias_fill_value == "-inf"
    with pytest.raises(CaseSyntaxError, match="PLACE one of"):
        parse_case("bias=bhqk,bias_fill=middle", ("float32",))


def test_draws_fill_only_a_drawn_bias():
    profile = profiles.get("dev")
    drawn = strategies.draw_cases(strategies.cases("s", FULL, profile), 40, 0)
    filled = [c for c in drawn if c.bias_fill is not None]
    assert filled and all(c.bias is not None and c.bias_fill_block == 128 for c in filled)
    no_bias = dataclasses.replace(FULL, bias=False)
    assert all(
        c.bias_fill is None for c in strategies.draw_cases(strategies.cases("s", no_bias, profile), 20, 0)
    )


def test_pairwise_edits_keep_a_fill_with_its_bias():
    (edit,) = [e for e in features.pairwise_edits() if e.name == "bias_fill"]
    (bias,) = [e for e in features.pairwise_edits() if e.name == "bias"]
    plain = Case("a", "float32")
    added = dataclasses.replace(plain, **edit.add(plain, BIAS))
    assert (added.bias, added.bias_fill, added.bias_fill_block) == ("bhqk", "first_block", 128)
    assert dataclasses.replace(added, **bias.remove(added)).bias_fill is None
    assert edit.needs == ("bias",)


def test_ci_curates_a_few_small_fill_cases():
    filled = [c for c in edge_matrix.edge_cases(0) if c.bias_fill is not None]
    assert 3 <= len(filled) <= 5
    assert {c.bias_fill for c in filled} == set(features.BIAS_FILL_PLACES)
    assert {"-inf", "-1e9"} <= {c.bias_fill_value for c in filled}
    assert any(c.softcap is not None and c.bias_fill_value == "-inf" for c in filled)
    assert all(c.kv_len > 128 for c in filled if c.bias_fill == "first_block")  # later keys stay visible


def test_a_repro_script_fills_the_bias_as_the_suite_does():
    functions, text = script_draws(FIRST, backward=False)
    assert "bias[draw_bias_fill(SEED, 9, (1, 1, 64, 256), 'first_block', 128, SK)] = float('-inf')" in text
    assert any(f.__name__ == "draw_bias_fill" for f in functions)


def test_a_nan_gradient_where_the_reference_is_finite_fails_backward():
    case = dataclasses.replace(FIRST, q_len=16, kv_len=160, bias_fill="first_block")
    oracle = Oracle(case)
    ref = oracle.reference_grads
    assert np.isfinite(ref.dbias).all() and (ref.dbias[..., :128] == 0).all()

    def outcome(dk: np.ndarray) -> numeric.Outcome:
        grads = SubjectGrads(dq=ref.dq, dk=dk, dv=ref.dv, dbias=ref.dbias)
        caps = dataclasses.replace(BIAS, backward=True, bias_grad=True)
        ctx = CheckContext(
            case,
            None,
            caps,
            oracle,
            types.SimpleNamespace(gradients=grads),
            profiles.get("ci"),
            backward=True,
        )  # type: ignore[arg-type]
        return numeric.backward(ctx)

    assert outcome(ref.dk).verdict == "pass"
    poisoned = ref.dk.copy()
    poisoned[0, 0, 0, 0] = np.nan  # a key the bias masks: its reference gradient is finite (0)
    failed = outcome(poisoned)
    assert failed.verdict == "fail" and "dk" in failed.reason

"""Quantized inputs case by case: q and K/V each in a storage the call accepts
(``Capabilities.q_storages``, ``kv_storages``), through the feature table (``--case``, grid,
pairwise, draws, curated cases) and into the built-in adapters that take them."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

from conformance.judge.inputs import build_inputs
from conformance.plan import catalogue, curated_sets, edge_matrix, pairwise, profiles, strategies
from conformance.plan.cases import Case
from conformance.plan.user_cases import CaseSyntaxError, parse_case
from kernels.contract import features
from kernels.contract.base import Capabilities
from kernels.contract.kv_storage_names import STORAGES, storage_parts
from kernels.runtime.kv_storage import quantize, represent
from tests.support.fakes import FULL, subject

STORED = dataclasses.replace(FULL, q_storages=STORAGES, kv_storages=STORAGES)
# Seen in a decode pack's dtype set only: one K/V storage the call takes per case.
KV_ONLY = dataclasses.replace(FULL, kv_storages=("int8",))


def test_the_case_syntax_names_each_tensor_storage_and_refuses_an_unknown_one():
    case = parse_case("q_storage=int8_per_head,kv_storage=float8_e4m3fn_per_tensor", ("float32",))
    assert (case.q_storage, case.kv_storage) == ("int8_per_head", "float8_e4m3fn_per_tensor")
    assert case.spec.q_storage == "int8_per_head" and case.spec.kv_storage == "float8_e4m3fn_per_tensor"
    assert parse_case("q_storage=no", ("float32",)).q_storage is None
    with pytest.raises(CaseSyntaxError, match="q_storage='int4': use int8, int8_per_channel"):
        parse_case("q_storage=int4", ("float32",))
    with pytest.raises(ValueError, match="unknown q_storage"):
        Case("s", "float32", q_storage="fp8")
    with pytest.raises(ValueError, match="unknown q_storages"):
        Capabilities(dtypes=("float32",), q_storages=("fp8",))


def test_each_tensor_storage_has_its_grid_column_label_token_and_words():
    from conformance.judge.runner import case_description
    from reports.run_report.grid import feature_grid, label
    from run_records.results_file import CaseResult

    case = Case("s", "float32", q_storage="int8_per_head", kv_storage="float8_e5m2_per_channel")
    assert "q_int8_per_head" in case.features and "kv_float8_e5m2_per_channel" in case.features
    assert case.case_id.endswith("-qint8_per_head-kvfloat8_e5m2_per_channel-B1-Hq1-Hkv1-Sq128-Sk128-D64")
    assert "q stored as int8_per_head" in features.words(case)
    assert label("q_int8_per_head") == "int8 q per head" and label("q_int8") == "int8 q"
    columns = [f"q_{s}" for s in STORAGES] + [f"kv_{s}" for s in STORAGES]
    assert set(columns) <= set(features.grid_order()) and len({label(c) for c in columns}) == len(columns)
    result = CaseResult(case_description(case), "forward", "pass", features=case.features)
    assert feature_grid([result]).cell("s", "q_int8_per_head").total == 1


def test_a_storage_outside_the_declaration_is_refused_with_the_declared_ones():
    case = Case("s", "float32", q_storage="int8")
    refused = [e.text for e in FULL.admits(case.skeleton(), case.spec, "float32", "forward")]
    assert refused == ["q stored as int8 not supported (declared: none)"]
    assert not STORED.admits(case.skeleton(), case.spec, "float32", "forward")
    kv = Case("s", "float32", kv_storage="int8_per_head")
    refused = [e.text for e in KV_ONLY.admits(kv.skeleton(), kv.spec, "float32", "forward")]
    assert refused == ["K/V stored as int8_per_head not supported (declared: ('int8',))"]


def test_a_fixed_kv_storage_is_the_one_declared_and_is_not_paired_or_drawn():
    fixed = dataclasses.replace(FULL, kv_storage="int8")
    assert fixed.kv_storages == ("int8",)
    with pytest.raises(ValueError, match="fixes every case's K/V storage"):
        dataclasses.replace(FULL, kv_storage="int8", kv_storages=("int8", "int8_per_head"))
    assert "kv_storage" not in {f.name for f in pairwise.declared_features(fixed)}
    assert {"q_storage", "kv_storage"} <= {f.name for f in pairwise.declared_features(STORED)}
    assert curated_sets.storage_cases(fixed, 0) == ()


def test_curated_storage_cases_hold_each_element_and_group_per_tensor_in_every_dtype():
    templates = curated_sets.storage_cases(STORED, 0)
    for field in ("q_storage", "kv_storage"):
        held = {part for c in templates for part in storage_parts(getattr(c, field))}
        assert held == {"int8", "float8_e4m3fn", "float8_e5m2", "token", "channel", "head", "tensor"}
    assert all(c.q_storage != c.kv_storage for c in templates)  # q's rotated: the two differ
    planned = set(catalogue.cases_for(subject("q", STORED), profiles.get("ci"), 0))
    for template in templates:
        for dtype in STORED.dtypes:
            assert edge_matrix.instantiate(template, "q", dtype) in planned
    assert len(edge_matrix.storage_pairs(STORAGES, STORAGES, 1)) == len(STORAGES)  # dev: every storage
    # A subject without storages gets none, anywhere in its plan.
    plain = catalogue.cases_for(subject("f", FULL), profiles.get("ci"), 0)
    assert {(c.q_storage, c.kv_storage) for c in plain} == {(None, None)}


def test_storages_are_paired_with_the_other_optional_inputs():
    cases = catalogue.cases_for(subject("q", STORED), profiles.get("ci"), 0)
    coverage = catalogue.pairwise_coverage(subject("q", STORED), cases)
    assert {"q_storage", "kv_storage"} <= set(coverage.features)
    assert not [c for c in coverage.uncovered if "storage" in pairwise.describe(c)]


def test_drawn_storages_come_from_the_declaration_and_leave_other_subjects_draws_alone(monkeypatch):
    """A subject that declares no storage draws no storage choice at all, so its drawn cases
    (ci's among them) are what they were before the storage features joined the table."""
    profile = profiles.get("dev")
    stored = strategies.draw_cases(strategies.cases("s", STORED, profile), 12, 3)
    assert {c.q_storage for c in stored} - {None} and {c.kv_storage for c in stored} - {None}
    kv_only = strategies.draw_cases(strategies.cases("s", KV_ONLY, profile), 12, 3)
    assert {c.q_storage for c in kv_only} == {None} and {c.kv_storage for c in kv_only} == {None, "int8"}
    plain = strategies.draw_cases(strategies.cases("s", FULL, profile), 12, 3)
    assert {(c.q_storage, c.kv_storage) for c in plain} == {(None, None)}
    without = tuple(f for f in features.FEATURES if f not in (features.Q_STORAGE, features.KV_STORAGE))
    monkeypatch.setattr(features, "FEATURES", without)
    assert strategies.draw_cases(strategies.cases("s", FULL, profile), 12, 3) == plain


def test_a_stored_q_is_on_its_grid_and_k_v_are_left_alone():
    case = Case("s", "bfloat16", q_storage="float8_e4m3fn_per_channel", batch=2, q_heads=2, kv_heads=2)
    built, plain = build_inputs(case), build_inputs(dataclasses.replace(case, q_storage=None))
    np.testing.assert_array_equal(represent(built.q, case.q_storage), built.q)
    assert not np.array_equal(built.q, plain.q) and built.q.dtype == plain.q.dtype
    w, step = quantize(built.q, case.q_storage)
    np.testing.assert_array_equal(w.astype(np.float64) * step, built.q.astype(np.float64))  # exact
    assert case.data_id != dataclasses.replace(case, q_storage=None).data_id  # a case of its own
    assert not np.array_equal(represent(built.k, case.q_storage), built.k)  # K is not stored: off the grid


# --- the built-in adapters that take them -----------------------------------------------------


def test_ragged_pages_hold_weights_whose_per_tensor_scales_give_back_k_and_v_exactly():
    from kernels.adapters.ragged_paged_attention import CONSTRAINTS, KV_STORAGES, stored_kv
    from reference.spec import AttentionShape, AttentionSpec

    case = Case("s", "bfloat16", kv_storage="float8_e4m3fn_per_tensor", batch=2, q_heads=4, kv_heads=2)
    built = build_inputs(case)
    w_k, w_v, (k_scale, v_scale) = stored_kv(built.k, built.v, case.kv_storage)
    assert str(w_k.dtype) == "float8_e4m3fn" and isinstance(k_scale, float)
    np.testing.assert_array_equal(w_k.astype(np.float64) * k_scale, built.k.astype(np.float64))
    np.testing.assert_array_equal(w_v.astype(np.float64) * v_scale, built.v.astype(np.float64))
    assert stored_kv(built.k, built.v, None)[2] == (None, None)
    assert all(storage_parts(s)[1] == "tensor" for s in KV_STORAGES)  # one float scale each
    tiling = next(c for c in CONSTRAINTS if c.name == "kv_heads_tiling_8bit")
    eight_bit = AttentionSpec(causal=True, kv_storage="int8_per_tensor")
    shape = lambda hkv: AttentionShape(1, 4, hkv, 8, 8, 128, 128)  # noqa: E731
    assert [h for h in (1, 2, 3, 4, 8, 16, 24, 32) if tiling.satisfied(shape(h), eight_bit)] == [
        2,
        4,
        8,
        16,
        32,
    ]
    assert tiling.satisfied(shape(1), AttentionSpec(causal=True))  # plain pages: the other constraint's


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs JAX")
def test_ragged_declares_8bit_pages_where_its_kernel_takes_scales_and_lowers_them():
    from kernels.adapters.ragged_paged_attention import RaggedPagedAttentionAdapter
    from kernels.hardware.lowering import lower

    adapter = RaggedPagedAttentionAdapter()
    assert adapter.capabilities().kv_storages == (
        "int8_per_tensor",
        "float8_e4m3fn_per_tensor",
        "float8_e5m2_per_tensor",
    )
    case = dataclasses.replace(
        edge_matrix.STORAGE_SHAPES[2],
        subject=adapter.name,
        dtype="bfloat16",
        kv_storage="float8_e5m2_per_tensor",
    )
    call = adapter.lowering(build_inputs(case), case.spec, "forward")
    assert "float8_e5m2" in str(call.args[1].dtype)  # the pages hold the weights
    lowered = lower(call)
    assert lowered.lowered, lowered.error
    assert [k.name for k in lowered.kernels] == ["ragged_paged_attention_kernel"]


@pytest.mark.skipif(importlib.util.find_spec("tokamax") is None, reason="needs tokamax")
def test_tokamax_takes_a_qarray_whose_dequantization_is_the_case_value_exactly():
    import qwix

    from kernels.adapters.tokamax import MOSAIC_TPU_DEQUANTIZES_Q_SINCE, TokamaxAdapter, _since, quantized

    case = Case("s", "bfloat16", q_storage="int8_per_channel", q_heads=2, kv_heads=2)
    q = build_inputs(case).q
    array = quantized(q, case.q_storage, q.dtype)
    assert isinstance(array, qwix.QArray) and str(array.qvalue.dtype) == "int8"
    back = np.asarray(qwix.dequantize(array))
    assert back.dtype == q.dtype and np.array_equal(back, q)
    caps = TokamaxAdapter(impl="xla").capabilities()
    assert caps.q_storages == STORAGES == caps.kv_storages
    # No gradient with respect to weights: the backward pass is judged on plain inputs.
    assert caps.admits(case.skeleton(), case.spec, "bfloat16", "backward")[0].text.startswith(
        "quantized_inputs_forward_only"
    )
    mosaic = TokamaxAdapter(impl="mosaic_tpu").capabilities()
    kv_case = Case("s", "bfloat16", kv_storage="int8_per_channel", q_heads=2, kv_heads=2)
    (raising,) = [
        e for e in mosaic.admits(kv_case.skeleton(), kv_case.spec, "bfloat16", "forward") if e.raises
    ]
    assert raising.constraint.name == "mosaic_tpu_qarray"
    assert raising.constraint.exceptions == ("NotImplementedError",)  # the contract; TypeError is ledgered
    # a quantized q alone: Mosaic TPU dequantizes it from tokamax 0.0.13 on
    q_raises = [e for e in mosaic.admits(case.skeleton(), case.spec, "bfloat16", "forward") if e.raises]
    assert bool(q_raises) != _since(MOSAIC_TPU_DEQUANTIZES_Q_SINCE)


def test_a_stored_tensor_counts_a_byte_an_element_in_the_minimum_bytes():
    from conformance.judge.checks.hardware import minimum_bytes

    plain = Case("s", "bfloat16", q_heads=2, kv_heads=2, head_dim=64, v_head_dim=64)
    elements = 2 * 128 * 64  # q: Hq * Sq * D
    stored_q = dataclasses.replace(plain, q_storage="float8_e4m3fn_per_head")
    assert minimum_bytes(plain, "forward") - minimum_bytes(stored_q, "forward") == elements
    stored_kv = dataclasses.replace(plain, kv_storage="int8")
    assert minimum_bytes(plain, "forward") - minimum_bytes(stored_kv, "forward") == 2 * elements

"""K/V storage: the int8 grid a subject's cache holds, and how every case of such a subject
gets its K/V rounded to it (the reference sees exactly the stored values)."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from conformance.judge.inputs import build_inputs
from conformance.plan import catalogue, profiles, strategies
from conformance.plan.cases import Case
from conformance.plan.user_cases import extend_plan
from kernels.contract.base import Capabilities
from kernels.runtime.kv_storage import (
    ELEMENT_LIMITS,
    INT8_LIMIT,
    KV_STORAGES,
    int8_quantize,
    quantize,
    represent,
    storage_parts,
)
from tests.support.fakes import FULL, subject


def test_int8_grid_is_a_power_of_two_step_per_token_and_exact_in_every_dtype():
    x = np.random.default_rng(0).standard_normal((2, 3, 40, 64)) * 3.0
    w, step = int8_quantize(x)
    assert w.dtype == np.int8 and step.shape == (2, 3, 40, 1)
    assert np.abs(w).max() <= INT8_LIMIT and np.abs(w).max(axis=-1).min() >= 64  # the step is the smallest
    assert np.array_equal(np.exp2(np.round(np.log2(step))), step)
    assert np.abs(w * step - x).max() <= step.max() / 2
    for dtype in (np.float32, ml_dtypes.bfloat16):
        stored = represent(x.astype(dtype), "int8")
        w, step = int8_quantize(x.astype(dtype))
        assert stored.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(stored.astype(np.float64), w * step)  # no second rounding
        np.testing.assert_array_equal(represent(stored, "int8"), stored)  # idempotent


def test_int8_keeps_nan_tokens_and_zero_tokens():
    x = np.ones((1, 1, 3, 4), np.float32)
    x[0, 0, 1] = np.nan
    x[0, 0, 2] = 0.0
    stored = represent(x, "int8")
    assert np.isnan(stored[0, 0, 1]).all() and (stored[0, 0, 2] == 0).all() and (stored[0, 0, 0] == 1).all()


def test_no_storage_is_the_identity_and_an_unknown_one_names_the_choices():
    x = np.arange(4.0)
    assert represent(x, None) is x
    with pytest.raises(ValueError, match="int8"):
        represent(x, "int4")
    with pytest.raises(ValueError, match="kv_storage"):
        Case("s", "float32", kv_storage="int4")
    with pytest.raises(ValueError, match="kv_storage"):
        Capabilities(dtypes=("float32",), kv_storage="fp8")


def test_a_case_with_int8_storage_has_its_kv_on_the_grid_and_its_own_data():
    plain = Case("s", "float32", batch=2, kv_len=64, kv_lengths=(64, 9), input_kind="nan_padding")
    int8 = dataclasses.replace(plain, kv_storage="int8")
    assert int8.data_id != plain.data_id and "kvint8" in int8.case_id and "kv_int8" in int8.features
    built = build_inputs(int8)
    for x in (built.k, built.v):
        assert x.dtype == np.float32
        np.testing.assert_array_equal(represent(x, "int8"), x)
    assert np.isnan(built.k[1, :, 9:]).all()  # NaN padding survives the storage
    assert not np.array_equal(represent(built.q, "int8"), built.q)  # q is not stored: off the grid


INT8 = dataclasses.replace(FULL, kv_storage="int8", dtypes=("float32",))


def test_every_planned_drawn_and_user_case_of_an_int8_subject_carries_the_storage():
    cases = catalogue.cases_for(subject("q8", INT8), profiles.get("ci"), 0)
    assert cases and {c.kv_storage for c in cases} == {"int8"}
    assert {c.kv_storage for c in catalogue.cases_for(subject("f", FULL), profiles.get("ci"), 0)} == {None}
    drawn = strategies.draw_cases(strategies.cases("q8", INT8, profiles.get("dev")), 5, 1)
    assert drawn and {c.kv_storage for c in drawn} == {"int8"}
    plan = extend_plan({}, (subject("q8", INT8),), (Case("user", "float32"),))
    assert {p.case.kv_storage for items in plan.values() for p in items} == {"int8"}


def test_an_int8_case_runs_on_the_int8_control_and_its_record_keeps_the_storage():
    """Through the runner: the int8 paged decode control passes an int8 case; the record keeps
    ``kv_storage`` through JSON, the description names it and the grid gives it a row."""
    from conformance.judge.runner import Runner
    from conformance.plan.subjects import resolve_subjects
    from reports.run_report.describe import describe_case
    from reports.run_report.grid import feature_grid, label
    from run_records.results_file import case_result_from_json, case_result_to_json

    (control,) = resolve_subjects("tests.mutants.paged:Int8PagedDecode")
    case = Case(control.name, "float32", q_len=1, kv_len=64, batch=2, kv_lengths=(64, 21), kv_storage="int8")
    planned = catalogue.classify("forward", case, control.capabilities)
    result = Runner((control,), profiles.get("ci"), shrink=False).evaluate(planned)
    assert result.verdict == "pass", result.reason
    again = case_result_from_json(case_result_to_json(result))
    assert again.case.kv_storage == "int8" and "kv_int8" in again.features
    assert "K/V stored as int8" in describe_case(again.case)
    assert (
        feature_grid([again]).cell(control.name, "kv_int8").status == "pass"
        and label("kv_int8") == "int8 K/V"
    )


@pytest.mark.parametrize("storage", [s for s in KV_STORAGES if s != "int8"])
def test_every_storage_is_a_power_of_two_scale_per_group_exact_and_idempotent(storage):
    """int8 and fp8 weights, one scale per token, (head, channel), head or tensor: the stored
    values are w * step exactly, in float32 and bfloat16 alike, and rounding them again changes
    nothing (an adapter quantizes its inputs again and must get the same weights)."""
    element, group = storage_parts(storage)
    x = np.random.default_rng(1).standard_normal((2, 3, 40, 8)) * 3.0
    w, step = quantize(x, storage)
    shapes = {"token": (2, 3, 40, 1), "channel": (1, 3, 1, 8), "head": (1, 3, 1, 1), "tensor": (1, 1, 1, 1)}
    assert step.shape == shapes[group] and np.array_equal(np.exp2(np.round(np.log2(step))), step)
    assert str(w.dtype) == element and np.abs(w.astype(np.float64)).max() <= ELEMENT_LIMITS[element]
    for dtype in (np.float32, ml_dtypes.bfloat16):
        stored = represent(x.astype(dtype), storage)
        w, step = quantize(stored, storage)
        np.testing.assert_array_equal(stored.astype(np.float64), w.astype(np.float64) * step)
        np.testing.assert_array_equal(represent(stored, storage), stored)
    assert Capabilities(dtypes=("float32",), kv_storage=storage).kv_storage == storage
    assert Case("s", "float32", kv_storage=storage).case_id.endswith(
        f"kv{storage}-B1-Hq1-Hkv1-Sq128-Sk128-D64"
    )


def test_storage_names_read_element_and_group():
    assert storage_parts("int8") == ("int8", "token")
    assert storage_parts("float8_e5m2_per_channel") == ("float8_e5m2", "channel")
    with pytest.raises(ValueError, match="choose from"):
        storage_parts("int8_per_token")  # that one is spelled "int8"


def test_every_storage_has_its_own_grid_column_and_label():
    """The feature table labels a column per storage from its name (kernels/contract/kv_storage_names.py),
    so a new storage gets a grid row with no edit to the table; the storage's case counts there."""
    from conformance.judge.runner import case_description
    from kernels.contract import features
    from reports.run_report.grid import feature_grid, label
    from run_records.results_file import CaseResult

    labels = features.labels()
    columns = [f"kv_{storage}" for storage in KV_STORAGES]
    assert all(column in labels for column in columns) and len({labels[c] for c in columns}) == len(columns)
    assert (
        label("kv_int8") == "int8 K/V" and label("kv_float8_e4m3fn_per_head") == "float8_e4m3fn K/V per head"
    )
    assert set(columns) <= set(features.grid_order())
    case = Case("s", "float32", kv_storage="float8_e5m2_per_channel")
    assert "kv_float8_e5m2_per_channel" in case.features
    result = CaseResult(case_description(case), "forward", "pass", features=case.features)
    assert feature_grid([result]).cell("s", "kv_float8_e5m2_per_channel").total == 1

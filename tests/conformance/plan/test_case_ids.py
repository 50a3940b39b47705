"""Meta-tests of case descriptions, ids and the curated edge matrix."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conformance.judge.runner import case_description
from conformance.plan import edge_matrix
from conformance.plan.cases import Case
from run_records.results_file import CaseResult, case_result_from_json, case_result_to_json


def test_case_id_reads_like_a_sentence():
    case = Case(
        "tpu_flash",
        "bfloat16",
        batch=2,
        q_heads=4,
        kv_heads=4,
        q_len=128,
        kv_len=256,
        head_dim=128,
        v_head_dim=128,
        causal=True,
    )
    assert case.case_id == "tpu_flash-bfloat16-causal_tl-B2-Hq4-Hkv4-Sq128-Sk256-D128"
    # Each feature's token: test_feature_table.py. An input kind other than normal ends the id.
    padded = dataclasses.replace(case, q_lengths=(5, 128), input_kind="nan_padding")
    assert padded.case_id == "tpu_flash-bfloat16-causal_tl-lenq5.128-B2-Hq4-Hkv4-Sq128-Sk256-D128-nan_padding"


def test_seed_is_stable_and_the_same_for_every_subject():
    a, b = Case("tpu_flash", "float32"), Case("xla", "float32")
    assert a.seed == b.seed == Case("tpu_flash", "float32").seed
    assert a.seed != Case("tpu_flash", "bfloat16").seed


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"bias": "bhq"}, "pattern"),
        ({"mask": "bxqk"}, "pattern"),
        ({"q_lengths": (1, 2)}, "one length per batch"),
        ({"input_kind": "uniform"}, "unknown input kind"),
        ({"input_kind": "nan_padding"}, "needs lengths or segment ids"),
        ({"alignment": "middle"}, "alignment"),
        ({"window": (-1, 0)}, "window"),
    ],
)
def test_impossible_cases_fail_at_construction(fields, message):
    with pytest.raises(ValueError, match=message):
        Case("x", "float32", **fields)


def test_edge_matrix_ids_are_unique_and_cover_the_issue_list():
    templates = edge_matrix.edge_cases(2)
    ids = [edge_matrix.instantiate(t, "s", "float32").case_id for t in templates]
    assert len(ids) == len(set(ids))
    lengths = {t.q_len for t in templates} | {t.kv_len for t in templates}
    assert set(edge_matrix.CURATED_LENGTHS) <= lengths
    assert {t.head_dim for t in templates} >= {64, 96, 128, 256}
    assert any(t.v_head_dim != t.head_dim for t in templates)
    assert {t.q_heads // t.kv_heads for t in templates} >= {1, 2, 4, 8}
    assert any(t.kv_heads == 1 and t.q_heads > 1 for t in templates)
    aligned = {t.alignment for t in templates if t.causal and t.q_len != t.kv_len}
    assert aligned == {"top_left", "bottom_right", "bottom_right_valid"}
    assert any(t.q_len > t.kv_len for t in templates) and any(t.q_len < t.kv_len for t in templates)
    windows = {t.window for t in templates if t.window}
    assert (0, 0) in windows and (1, 1) in windows
    assert any(w[0] is not None and w[0] > 256 for w in windows)  # wider than the sequence
    assert {t.softcap for t in templates if t.softcap} >= {1.0, 30.0}
    assert {t.bias for t in templates if t.bias} >= {"bhqk", "1h1k", "b11k", "11qk", "111k"}
    assert {t.input_kind for t in templates} == {"normal", "large", "integers", "nan_padding"}
    assert any(t.orphan_segment for t in templates)
    assert any(t.q_lengths and 0 in t.q_lengths for t in templates)


def test_ci_level_is_a_subset_of_dev_and_thorough():
    ci, dev, thorough = (set(edge_matrix.edge_cases(level)) for level in (0, 1, 2))
    assert ci < dev < thorough


def test_description_rebuilds_the_case_and_says_its_features_in_words():
    case = Case("x", "bfloat16", segments=2, kv_lengths=(3,), bias="1h1k", window=(1, 2))
    record = case_description(case)
    assert record.case_id == case.case_id and record.seed == case.seed
    assert Case(record.subject, record.dtype, **dict(record.fields)) == case  # nothing dropped
    assert record.window == (1, 2) and record.kv_lengths == (3,) and record.bias == "1h1k"
    assert (
        record.words == "window (left 1, right 2), segment ids, valid lengths (padding), bias [1, 1, 1, 128]"
    )
    back = case_result_from_json(
        json.loads(json.dumps(case_result_to_json(CaseResult(record, "forward", "pass"))))
    )
    assert back.case == record


def test_a_chunked_causal_case_names_its_chunk_and_needs_causal():
    case = Case("x", "float32", causal=True, chunk=48, window=(16, None))
    assert case.case_id == "x-float32-causal_tl-chunk48-win16.inf-B1-Hq1-Hkv1-Sq128-Sk128-D64"
    assert case.spec.chunk == 48 and "chunked_causal" in case.features
    assert "chunked causal (chunks of 48 keys)" in case.words()
    with pytest.raises(ValueError, match="chunk needs causal=True"):
        Case("x", "float32", chunk=48)


def test_user_cases_take_a_chunk_and_it_implies_causal():
    from conformance.plan.user_cases import CaseSyntaxError, parse_case

    case = parse_case("B=1,Sq=256,Sk=256,D=64,chunk=64", ("float32",))
    assert case.chunk == 64 and case.causal and case.alignment == "top_left"
    assert parse_case("Sq=128,Sk=256,causal=bottom_right,chunk=48", ("float32",)).alignment == "bottom_right"
    with pytest.raises(CaseSyntaxError, match="chunk='x' is not an integer"):
        parse_case("chunk=x", ("float32",))
    with pytest.raises(CaseSyntaxError, match="positive number of keys"):
        parse_case("chunk=-4", ("float32",))


def test_the_chunk_edges_hold_chunk_one_a_non_divisor_the_whole_sequence_and_both_alignments():
    ci, dev = edge_matrix.chunk_cases(0), edge_matrix.chunk_cases(1)
    assert {t.chunk for t in ci} >= {1, 48} and all(t.q_len % 48 for t in ci if t.chunk == 48)
    assert {t.alignment for t in ci if t.q_len != t.kv_len} == {"top_left", "bottom_right"}
    assert set(ci) < set(dev) and all(t.chunk is not None and t.causal for t in dev)
    assert any(t.chunk == max(t.q_len, t.kv_len) for t in dev)  # as long as the sequence
    assert any(t.chunk > max(t.q_len, t.kv_len) for t in dev)  # longer
    assert {(t.q_len > t.kv_len, t.alignment) for t in dev if t.q_len != t.kv_len} == {
        (a, b) for a in (False, True) for b in ("top_left", "bottom_right")
    }


def test_ragged_patterns_put_each_pattern_in_the_first_a_middle_and_the_last_row():
    ci = edge_matrix.ragged_patterns(0)
    placements = [p for pattern in ci for p in pattern.placements]
    for name in ("empty", "one", "page+1"):
        assert {f"{name}@{where}" for where in ("first", "middle", "last")} <= set(placements)
    assert any(set(p.rows) == {"empty"} for p in ci)  # the all-empty batch
    dev = edge_matrix.ragged_patterns(1)
    for name in ("block-1", "block", "block+1"):
        assert {f"{name}@{where}" for where in ("first", "middle", "last")} <= {
            p for pattern in dev for p in pattern.placements
        }
    (long,) = [p for p in dev if p.name == "one_long"]
    assert long.rows.count("long") == 1 and len(long.rows) > 3

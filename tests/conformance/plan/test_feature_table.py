"""What every feature of the table promises (``kernels/contract/features.py``, ``Feature``'s
docstring), checked once per feature: its fields, its ``--case`` spelling, its id token, words and
grid column, its spec fields, inputs and keywords, its declaration and refusal, its pairwise edits
and its draws. A feature's own semantics stay in its dimension's test module
(``test_sinks_dimension.py``, ...)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conformance.plan import catalogue, profiles, strategies
from conformance.plan.cases import Case
from conformance.plan.user_cases import parse_case
from kernels.contract import features
from kernels.contract.base import Capabilities
from reference.spec import AttentionInputs, AttentionSpec
from tests.support.fakes import EVERY_FEATURE

# One ``--case`` spelling of each feature (every key it parses), the fields it reads as, and the id
# fragment that names it: its token, or for a feature of the shape (no token) the shape's own.
# A feature added to the table fails every test here until it has one.
EXAMPLES: dict[str, tuple[str, dict[str, Any], str]] = {
    "causal": (
        "Sk=256,causal=top_left,align=bottom_right",
        {"kv_len": 256, "causal": True, "alignment": "bottom_right"},
        "causal_br",
    ),
    "chunked_causal": ("chunk=48", {"chunk": 48, "causal": True}, "chunk48"),
    "window": ("window=4:inf", {"window": (4, None)}, "win4.inf_tl"),
    "segment_ids": ("B=2,segments=3", {"batch": 2, "segments": 3}, "seg3"),
    "lengths": (
        "B=2,q_lengths=5/7,kv_lengths=7/9",
        {"batch": 2, "q_lengths": (5, 7), "kv_lengths": (7, 9)},
        "lenq5.7-lenkv7.9",
    ),
    "bool_mask": ("mask=b1qk", {"mask": "b1qk"}, "mask_b1qk"),
    "bias": ("bias=1h1k", {"bias": "1h1k"}, "bias_1h1k"),
    "bias_fill": (
        "bias=bhqk,bias_fill=first_block:-inf,bias_fill_block=64",
        {"bias": "bhqk", "bias_fill": "first_block", "bias_fill_value": "-inf", "bias_fill_block": 64},
        "fill_first64_ninf",
    ),
    "softcap": ("softcap=30", {"softcap": 30.0}, "cap30"),
    "scale": ("scale=0.5", {"scale": 0.5}, "scale0.5"),
    "sinks": ("sinks=extreme", {"sinks": "extreme"}, "sink_extreme"),
    "q_storage": ("q_storage=int8", {"q_storage": "int8"}, "qint8"),
    "kv_storage": ("kv_storage=int8_per_channel", {"kv_storage": "int8_per_channel"}, "kvint8_per_channel"),
    "gqa": ("Hq=4,Hkv=2", {"q_heads": 4, "kv_heads": 2}, "Hq4-Hkv2"),
    "dv_ne_d": ("D=64,Dv=32", {"head_dim": 64, "v_head_dim": 32}, "D64-Dv32"),
    "leading_batch_dims": ("B=6,batch_dims=2x3", {"batch": 6, "batch_dims": (2, 3)}, "lead2x3"),
}
FEATURES = pytest.mark.parametrize("feature", features.FEATURES, ids=[f.name for f in features.FEATURES])
DTYPES = ("float32",)
BASE = parse_case("", DTYPES)  # no feature at all
CAPABILITY_FIELDS = {f.name for f in dataclasses.fields(Capabilities)}


def example(feature: features.Feature) -> Case:
    assert feature.name in EXAMPLES, f"add a --case spelling of {feature.name!r} to EXAMPLES"
    return parse_case(EXAMPLES[feature.name][0], DTYPES)


def without(caps: Capabilities, attribute: str) -> Capabilities:
    """``caps`` with ``attribute`` back at its default (undeclared)."""
    off: dict[str, Any] = {attribute: getattr(Capabilities(dtypes=caps.dtypes), attribute)}
    if attribute == "causal_alignments":
        off["chunked_causal_alignments"] = ()  # a chunked mask is causal: it goes too
    return dataclasses.replace(caps, **off)


def test_every_example_is_a_feature_of_the_table():
    assert set(EXAMPLES) == set(features.BY_NAME)


@FEATURES
def test_its_case_spelling_reads_back_as_its_fields_and_only_its_own_fields_are_set(feature):
    text, fields, _ = EXAMPLES[feature.name]
    case = example(feature)
    assert case == dataclasses.replace(BASE, **fields)
    assert set(feature.parse) <= {part.partition("=")[0] for part in text.split(",")}, "spell every key"
    assert feature.present(case) and not feature.present(BASE)
    assert feature.validate(case) is None
    for field in feature.fields:
        assert getattr(BASE, field.name) == field.default, field.name


@FEATURES
def test_its_token_names_it_in_the_id_and_only_when_present(feature):
    case, fragment = example(feature), EXAMPLES[feature.name][2]
    token = feature.token(case)
    assert feature.token(BASE) is None
    if token is not None:
        assert token == fragment and f"-{token}-" in case.case_id
    else:  # a feature of the shape: the shape's words say it
        assert f"-{fragment}" in case.case_id and fragment not in BASE.case_id
    assert case.case_id != BASE.case_id
    words = feature.words(case)
    assert (words is None) == (token is None) and feature.words(BASE) is None
    assert words is None or words in case.words()


@FEATURES
def test_its_grid_column_has_a_place_in_the_grid(feature):
    column = feature.grid(example(feature))
    assert feature.grid(BASE) is None
    if column is not None:
        assert column in example(feature).features and column in features.grid_order()
        assert not feature.labels or column in feature.labels  # labelled where it labels any


@FEATURES
def test_its_spec_fields_inputs_and_keywords_carry_it_to_the_call(feature):
    case = example(feature)
    spec_fields = {f.name for f in dataclasses.fields(AttentionSpec)}
    for name in feature.spec_fields:
        assert name in spec_fields and getattr(case.spec, name) == getattr(case, name) is not None, name
    inputs, bare = case.skeleton(), BASE.skeleton()
    assert set(feature.inputs) <= {f.name for f in dataclasses.fields(AttentionInputs)}
    assert set(feature.batch_inputs) <= set(feature.inputs)
    for name in feature.inputs:
        assert getattr(inputs, name) is not None and getattr(bare, name) is None, name
    keywords = feature.keywords(inputs, case.spec)
    assert set(keywords) <= set(feature.accepts) and bool(keywords) == bool(feature.accepts)
    assert feature.keywords(bare, BASE.spec) == {}
    assert keywords.items() <= features.call_keywords(inputs, case.spec).items()


@FEATURES
def test_a_subject_runs_it_where_declared_and_is_told_why_not_elsewhere(feature):
    case = example(feature)
    assert catalogue.classify("forward", case, EVERY_FEATURE).status == "run"
    assert set(feature.accepts) <= set(features.accepted_keywords(EVERY_FEATURE))
    for attribute in (feature.from_subject, *(g.declared_by for g in feature.gradients)):
        assert attribute is None or attribute in CAPABILITY_FIELDS, attribute
    assert {g.input for g in feature.gradients} <= set(feature.inputs)
    if feature.capability is None:  # every subject takes it
        assert feature.refusals == () and feature.declared(Capabilities(dtypes=DTYPES))
        return
    assert feature.capability in CAPABILITY_FIELDS
    undeclared = without(EVERY_FEATURE, feature.capability)
    assert feature.declared(EVERY_FEATURE) and not feature.declared(undeclared)
    planned = catalogue.classify("forward", case, undeclared)
    # The sentence is the table's, from a feature that the same attribute declares (a bias fill's is
    # the bias's).
    sharing = [f for f in features.FEATURES if f.capability == feature.capability]
    sentences = {
        text
        for f in sharing
        for refuse in f.refusals
        if (text := refuse(undeclared, case.shape, case.spec, case.skeleton()))
    }
    assert planned.status == "unsupported" and planned.reason in sentences, planned.reason
    assert not set(feature.accepts) & set(features.accepted_keywords(undeclared))


@FEATURES
def test_its_pairwise_edits_add_it_and_take_it_away(feature):
    plain = Case("s", "float32", batch=2, q_heads=2, kv_heads=2)
    for edit in feature.pairwise:
        assert edit.declared(EVERY_FEATURE) and not edit.declared(without(EVERY_FEATURE, feature.capability))
        added = dataclasses.replace(plain, **edit.add(plain, EVERY_FEATURE))
        assert edit.present(added) and feature.present(added) and not edit.present(plain), edit.name
        assert catalogue.classify("forward", added, EVERY_FEATURE).status == "run", edit.name
        removed = dataclasses.replace(added, **edit.remove(added))
        assert not edit.present(removed) and not feature.present(removed), edit.name
        assert set(edit.needs) <= {e.name for e in features.pairwise_edits()}


@FEATURES
def test_it_is_drawn_only_for_a_subject_that_declares_it(feature):
    if not feature.draws or feature.capability is None:
        pytest.skip(f"{feature.name} is never drawn, or drawn for every subject")
    profile = profiles.get("dev")
    declared = strategies.draw_cases(strategies.cases("s", EVERY_FEATURE, profile), 40, 0)
    assert any(feature.present(c) for c in declared)
    undeclared = without(EVERY_FEATURE, feature.capability)
    drawn = strategies.draw_cases(strategies.cases("s", undeclared, profile), 20, 0)
    assert not any(feature.present(c) for c in drawn)

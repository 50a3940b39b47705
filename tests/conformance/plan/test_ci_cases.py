"""A variant's own ci cases (``Variant.ci_cases``): at ci they are its whole plan, in dev and thorough
the catalogue is; each must be a case its subject runs, and the set must reach what it is there for."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.plan import catalogue
from conformance.plan.profiles import PROFILES
from conformance.plan.subjects import resolve_subjects
from kernels import subjects
from kernels.adapters.paged_attention import PAGE_SIZE
from kernels.subjects import BATCHED_RPA_CI_CASES, BuiltinSubject, CatalogueError, Variant

BATCHED_RPA = "tokamax_batched_rpa[impl=reference]"


@pytest.fixture(scope="module")
def batched_rpa():
    (subject,) = resolve_subjects(BATCHED_RPA)
    if not subject.available:
        pytest.skip(f"{BATCHED_RPA} cannot run here: {subject.reason}")
    return subject


def planned_ids(subject, profile: str) -> set[str]:
    plan = catalogue.plan((subject,), PROFILES[profile], 0)
    return {p.case.case_id for items in plan.values() for p in items}


def test_the_batched_rpa_reference_is_ci_with_its_own_cases():
    (variant,) = [v for v in subjects.variants() if v.name == BATCHED_RPA]
    assert variant.tier == "ci" and variant.ci_cases == BATCHED_RPA_CI_CASES
    assert subjects.ci_cases(BATCHED_RPA) == BATCHED_RPA_CI_CASES
    assert subjects.ci_cases("xla") == () and subjects.ci_cases("my_pkg.attn:attention") == ()


def test_at_ci_the_plan_is_exactly_the_declared_cases_and_dev_keeps_the_catalogue(batched_rpa):
    declared = catalogue.declared_cases(batched_rpa.name, BATCHED_RPA_CI_CASES, batched_rpa.capabilities)
    assert planned_ids(batched_rpa, "ci") == {c.case_id for c in declared}
    dev = catalogue.cases_for(batched_rpa, PROFILES["dev"], 0)
    assert len(dev) > 10 * len(declared)


def test_every_ci_case_runs_forward_and_its_cache_write_is_judged(batched_rpa):
    caps = batched_rpa.capabilities
    for case in catalogue.declared_cases(batched_rpa.name, BATCHED_RPA_CI_CASES, caps):
        for check in ("forward", "kv_cache", "shape_dtype", "no_mutation"):
            planned = catalogue.classify(check, case, caps)
            assert planned is not None and planned.status == "run", (case.case_id, check, planned)


def test_the_ci_cases_reach_decode_prefill_pages_gqa_window_and_both_dtypes(batched_rpa):
    cases = catalogue.declared_cases(batched_rpa.name, BATCHED_RPA_CI_CASES, batched_rpa.capabilities)
    rows = [
        (q, kv)
        for c in cases
        if c.kv_lengths is not None
        for q, kv in zip(c.q_lengths or (c.q_len,) * c.batch, c.kv_lengths, strict=True)
    ]
    assert any(q == 1 and kv > 1 for q, kv in rows), "a decode row"
    assert any(q > 1 and q == kv for q, kv in rows), "a prefill row"
    assert any(1 < q < kv for q, kv in rows), "a chunked prefill row"
    assert any(q == kv == 0 for q, kv in rows), "an empty sequence"
    assert any(kv % PAGE_SIZE and kv > PAGE_SIZE for q, kv in rows), "a row ending inside a later page"
    assert any(kv and kv % PAGE_SIZE == 0 for q, kv in rows), "a row ending on a page edge"
    assert any(c.q_heads > c.kv_heads for c in cases), "GQA"
    assert any(c.head_dim % 128 for c in cases), "a head dim padded to the cache's lanes"
    assert any(c.window is not None for c in cases) and any(c.softcap is not None for c in cases)
    assert any(not c.causal for c in cases), "use_causal_mask=False"
    assert {c.dtype for c in cases} == {"float32", "bfloat16"}


def test_a_ci_case_that_cannot_be_the_subjects_names_the_table(batched_rpa):
    caps = batched_rpa.capabilities
    with pytest.raises(
        CatalogueError, match=r"tokamax_batched_rpa\[impl=reference\]'s ci_cases in kernels/subjects"
    ):
        catalogue.declared_cases(batched_rpa.name, ("B=1,Hq=3,Hkv=2",), caps)
    with pytest.raises(CatalogueError, match="dtype 'float16'"):
        catalogue.declared_cases(batched_rpa.name, ("B=1,dtype=float16",), caps)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (Variant(name="toy", tier="dev", platforms=("cpu",), ci_cases=("B=1",)), "ci_cases in tier 'dev'"),
        (Variant(name="toy", tier="ci", platforms=("cpu",), ci_cases=("",)), "non-empty --case string"),
    ],
)
def test_ci_cases_outside_the_ci_tier_or_empty_are_refused(variant, message):
    subject = BuiltinSubject(name="toy", adapter="toy:Toy", variants=(variant,))
    with pytest.raises(CatalogueError, match=message):
        subjects.validate((subject,))
    subjects.validate(
        (
            dataclasses.replace(
                subject, variants=(dataclasses.replace(variant, tier="ci", ci_cases=("B=1",)),)
            ),
        )
    )

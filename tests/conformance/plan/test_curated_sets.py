"""The curated sets (``conformance/plan/curated_sets.py``): each names real features, holds cases of
them, and reaches a subject's plan through ``cases_for``'s one loop in the dtypes it declares."""

from __future__ import annotations

import dataclasses

from conformance.plan import catalogue, curated_sets, edge_matrix, profiles
from conformance.plan.cases import Case
from conformance.plan.curated_sets import CURATED_SETS, CuratedSet
from kernels.contract import features
from tests.support.fakes import EVERY_FEATURE, FULL, subject

# FULL's dtypes and an fp8 one, which level 0 runs on edge_matrix.FP8_CORE's templates only.
WITH_FP8 = dataclasses.replace(FULL, dtypes=(*FULL.dtypes, "float8_e4m3fn"))


def test_every_curated_set_has_its_own_name_and_names_features_of_the_feature_table():
    names = [s.name for s in CURATED_SETS]
    assert len(set(names)) == len(names)
    unknown = {(s.name, f) for s in CURATED_SETS for f in s.features if f not in features.BY_NAME}
    assert not unknown, f"not in kernels/contract/features.py's FEATURES: {sorted(unknown)}"


def test_each_set_of_a_feature_holds_only_cases_that_use_it():
    featured = [s for s in CURATED_SETS if s.features]
    assert {f for s in featured for f in s.features} >= {"chunked_causal", "lengths", "leading_batch_dims"}
    for curated_set in featured:
        templates = curated_set.templates(EVERY_FEATURE, 1)
        assert templates, curated_set.name
        owners = [features.BY_NAME[f] for f in curated_set.features]
        strays = [t for t in templates if not any(f.present(t) for f in owners)]
        assert not strays, (curated_set.name, strays[:1])


# Templates no other source plans: lengths and a head dim no profile draws.
EVERY_DTYPE = Case("", "", q_len=77, kv_len=91, head_dim=48, v_head_dim=48)
FIRST_DTYPE = dataclasses.replace(EVERY_DTYPE, q_len=79)


def _with_sets(monkeypatch, *added: CuratedSet) -> None:
    monkeypatch.setattr(curated_sets, "CURATED_SETS", (*CURATED_SETS, *added))


def _dtypes_of(template: Case, cases: tuple[Case, ...]) -> list[str]:
    return [c.dtype for c in cases if dataclasses.replace(c, subject="", dtype="") == template]


def test_a_declared_set_is_planned_by_cases_for_in_the_dtypes_its_rule_names(monkeypatch):
    ci = profiles.get("ci")
    assert not _dtypes_of(EVERY_DTYPE, catalogue.cases_for(subject("fake", FULL), ci, 0))
    _with_sets(
        monkeypatch,
        CuratedSet(
            name="every",
            features=(),
            templates=lambda caps, level: (EVERY_DTYPE,),
            dtypes="every",
            fp8_core_at_level_0=False,
        ),
        CuratedSet(
            name="first",
            features=(),
            templates=lambda caps, level: (FIRST_DTYPE,),
            dtypes="first",
            fp8_core_at_level_0=False,
        ),
    )
    cases = catalogue.cases_for(subject("fake", WITH_FP8), ci, 0)
    assert _dtypes_of(EVERY_DTYPE, cases) == ["float32", "bfloat16", "float16", "float8_e4m3fn"]
    assert _dtypes_of(FIRST_DTYPE, cases) == ["float32"]
    # The first dtype is the first in DTYPES order, not in the declaration's.
    reordered = dataclasses.replace(WITH_FP8, dtypes=("float16", "bfloat16", "float32"))
    assert _dtypes_of(FIRST_DTYPE, catalogue.cases_for(subject("fake", reordered), ci, 0)) == ["float32"]


def test_a_set_pruned_to_the_fp8_core_leaves_fp8_out_at_level_0_only(monkeypatch):
    assert EVERY_DTYPE not in edge_matrix.FP8_CORE
    _with_sets(
        monkeypatch,
        CuratedSet(
            name="every_fp8_core",
            features=(),
            templates=lambda caps, level: (EVERY_DTYPE,),
            dtypes="every",
            fp8_core_at_level_0=True,
        ),
    )
    ci = catalogue.cases_for(subject("fake", WITH_FP8), profiles.get("ci"), 0)
    assert _dtypes_of(EVERY_DTYPE, ci) == ["float32", "bfloat16", "float16"]
    dev = catalogue.cases_for(subject("fake", WITH_FP8), profiles.get("dev"), 0)
    assert _dtypes_of(EVERY_DTYPE, dev) == ["float32", "bfloat16", "float16", "float8_e4m3fn"]


def test_the_edge_configs_run_in_the_dtypes_their_config_shape_names():
    """CONFIG_SHAPES: the first (level 0) in the first dtype only, the second (level 1) in every one."""
    from kernels.contract.tunables import Tunable, Tunables

    tuned = dataclasses.replace(FULL, tunables=Tunables((Tunable("block_q", 128, "q", multiple_of=8),)))
    (_, first_shape, first_every), (_, second_shape, second_every) = edge_matrix.CONFIG_SHAPES[:2]
    assert (first_every, second_every) == (False, True)
    dev = [c for c in catalogue.cases_for(subject("tuned", tuned), profiles.get("dev"), 0) if c.config]
    on = {
        shape: {c.dtype for c in dev if dataclasses.replace(c, subject="", dtype="", config=()) == shape}
        for shape in (first_shape, second_shape)
    }
    assert on == {first_shape: {"float32"}, second_shape: set(FULL.dtypes)}

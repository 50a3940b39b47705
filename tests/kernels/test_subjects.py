"""The subject catalogue (kernels/subjects.py) agrees with the adapters, the profiles and the docs.

Names are written once, in the catalogue; each test here reads something that also names or
implies them (an adapter's ``OPTIONS``/``FAMILY_OPTION``, what it reports about itself on this
machine, the README's list, docs/adapters.md's tables) and fails where the two differ.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from conformance.plan.profiles import PROFILES
from conformance.plan.subjects import impl_names
from kernels import subjects
from kernels.contract.optional_members import optional_member
from kernels.registry import BUILTIN, UnknownSubjectError, _import_attribute, expand_family, resolve
from kernels.runtime.jax_runtime import default_backend
from kernels.subjects import SUBJECTS, TIERS, BuiltinSubject, CatalogueError, Variant

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = subjects.variants()
SUBJECT_TOKEN = re.compile(r"^[a-z_][a-z0-9_]*(\[[^\]]+\])?$|^\[[^\]]+\]$")  # name, name[k=v], [k=v]


def declared_variants(subject: BuiltinSubject) -> tuple[str, ...]:
    """What the adapter class itself says its variants are: one per value of its ``FAMILY_OPTION``,
    or its defaults (the bare name) and then each non-default value of each of its ``OPTIONS``."""
    adapter = _import_attribute(subject.adapter, subject.name)
    options: dict[str, tuple[str, ...]] = dict(optional_member(adapter, "OPTIONS"))
    family = optional_member(adapter, "FAMILY_OPTION")
    if family is not None:
        assert set(options) == {family}, f"{subject.name}: a family has its implementation option only"
        return tuple(f"{subject.name}[{family}={value}]" for value in options[family])
    defaults = {f.name: f.default for f in dataclasses.fields(adapter)}
    return (
        subject.name,
        *(
            f"{subject.name}[{key}={v}]"
            for key, values in options.items()
            for v in values
            if v != defaults[key]
        ),
    )


@pytest.mark.parametrize("subject", SUBJECTS, ids=lambda s: s.name)
def test_each_adapters_options_give_exactly_its_declared_variants(subject: BuiltinSubject):
    adapter = _import_attribute(subject.adapter, subject.name)
    assert optional_member(adapter, "FAMILY_OPTION") == subject.family
    assert tuple(v.name for v in subject.variants) == declared_variants(subject)
    for variant in subject.variants:  # each is the canonical name of the adapter it resolves to
        assert resolve(variant.name).name == variant.name
    assert BUILTIN[subject.name] == subject.adapter
    assert expand_family(subject.name) == tuple(v.name for v in subject.members)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_a_variant_that_runs_or_lowers_here_declares_that_platform(variant: Variant):
    backend = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}[default_backend()]
    availability = resolve(variant.name).availability()
    if availability.available:
        expected = "interpreted" if availability.execution == "interpret" else backend
        assert expected in variant.platforms, (variant.name, availability.execution_detail)
    elif availability.lowerable:
        assert "lowering" in variant.platforms, (variant.name, availability.reason)


def test_the_profiles_are_the_cost_tiers_and_each_runs_every_cheaper_tier():
    assert tuple(PROFILES) == TIERS
    runs = {tier: set(impl_names("all", tier)) for tier in TIERS}
    for tier in TIERS:
        assert runs[tier] == {v.name for v in VARIANTS if TIERS.index(v.tier) <= TIERS.index(tier)}
    assert runs["ci"] < runs["dev"] < runs["thorough"]


def test_an_unknown_tier_or_platform_is_one_line_naming_the_choices():
    with pytest.raises(UnknownSubjectError, match=r"unknown cost tier 'nightly'; use one of \('ci'"):
        impl_names("all", "nightly")
    with pytest.raises(CatalogueError, match="unknown platform.*'rocm'.*use one of"):
        subjects.on_platform("rocm")


def _subject(**changes) -> BuiltinSubject:
    plain = BuiltinSubject(
        name="toy",
        adapter="toy:Toy",
        variants=(Variant(name="toy", tier="ci", platforms=("cpu",)),),
    )
    return dataclasses.replace(plain, **changes)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"variants": ()}, "declares no variant"),
        ({"variants": (Variant(name="other", tier="ci", platforms=("cpu",)),)}, "not named after it"),
        ({"variants": (Variant(name="toy", tier="nightly", platforms=("cpu",)),)}, "tier 'nightly'"),
        ({"variants": (Variant(name="toy", tier="ci", platforms=("rocm",)),)}, "platforms must be"),
        ({"variants": (Variant(name="toy", tier="ci", platforms=()),)}, "platforms must be"),
        (
            {"variants": (Variant(name="toy[a=b]", tier="ci", platforms=("cpu",)),)},
            "first variant is its bare",
        ),
        ({"family": "impl"}, "must set impl= and nothing else"),
    ],
)
def test_a_declaration_against_the_rule_names_the_fix(bad, message):
    with pytest.raises(CatalogueError, match=message):
        subjects.validate((_subject(**bad),))


def test_a_name_declared_twice_is_refused():
    with pytest.raises(CatalogueError, match="subject 'toy' is declared twice"):
        subjects.validate((_subject(), _subject()))


def test_the_gpu_subjects_are_the_variants_no_cpu_runs_natively():
    gpu = subjects.on_platform("cuda", unless=("cpu",))
    assert {"cudnn", "pallas_mgpu", "tokamax[impl=mosaic_gpu]", "tokamax[impl=triton]"} <= set(gpu)
    assert "xla" not in gpu and "tpu_flash" not in gpu


# --- the docs name every built-in and nothing else -------------------------------------------


def named_variants(tokens: list[str]) -> set[str]:
    """The variants some backticked docs tokens name: ``name`` (a family's bare name is all its
    members), ``name[k=a|b]``, ``name[k=...]`` (every value), and ``[k=v]`` after a name (that
    name's option). A token naming no built-in variant fails here, with its text."""
    by_name = {s.name: s for s in SUBJECTS}
    known = {v.name for v in VARIANTS}
    found: set[str] = set()
    last = None
    for token in tokens:
        base, _, options = token.partition("[")
        if token.startswith("["):
            assert last is not None, f"{token!r} names no subject before it"
            base = last
        assert base in by_name, f"{token!r} names {base!r}, which is not a built-in subject"
        last = base
        if not options:
            found |= {v.name for v in by_name[base].members}
            continue
        key, _, values = options.rstrip("]").partition("=")
        if values == "...":
            matches = {v.name for v in by_name[base].variants if f"[{key}=" in v.name}
        else:
            matches = {f"{base}[{key}={value}]" for value in values.split("|")}
        assert matches and matches <= known, f"{token!r} names no built-in variant (or one too many)"
        found |= matches
    return found


def _backticked(text: str) -> list[str]:
    return [t for t in re.findall(r"`([^`]+)`", text) if SUBJECT_TOKEN.match(t)]


def test_the_readme_names_every_built_in_subject_and_no_other():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    paragraph = readme[readme.index("Built-in subjects") :].split("\n\n")[0]
    named = named_variants(_backticked(paragraph))
    assert {v.partition("[")[0] for v in named} == {s.name for s in SUBJECTS}


def _table_first_cells(text: str, header: str) -> list[list[str]]:
    """The first cell of each row of every table whose first header cell is ``header``."""
    cells, inside = [], False
    for line in text.splitlines():
        if line.startswith(f"| {header} |"):
            inside = True
        elif inside and line.startswith("|") and not line.startswith("|---"):
            cells.append(line.split("|")[1])
        elif not line.startswith("|"):
            inside = False
    return cells


def test_docs_adapters_table_names_every_variant_and_its_other_tables_only_built_ins():
    text = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    rows = _table_first_cells(text, "name")
    assert {v for cell in rows for v in named_variants(_backticked(cell))} == {v.name for v in VARIANTS}
    for cell in _table_first_cells(text, "subject"):
        tokens = _backticked(cell) or [cell.strip()]
        named_variants(tokens)  # fails on a name that is not built in


def test_an_absent_optional_member_reads_as_its_one_default_and_an_unknown_one_is_refused():
    from kernels.adapters.tokamax import TokamaxAdapter
    from kernels.adapters.torch_sdpa import TorchSdpaAdapter
    from kernels.contract.optional_members import OPTIONAL_MEMBERS

    plain = TorchSdpaAdapter()  # no options, no family, no JAX call
    assert {name: optional_member(plain, name) for name in OPTIONAL_MEMBERS} == {
        "OPTIONS": {},
        "FAMILY_OPTION": None,
        "configured": None,
        "standalone": None,
        "lowering": None,
        "jax_call": None,
        "dropout": None,
        "contract_call": None,
    }
    assert optional_member(TokamaxAdapter, "FAMILY_OPTION") == "impl"
    assert callable(optional_member(TokamaxAdapter(), "configured"))
    with pytest.raises(KeyError, match="'lowers' is not an optional Adapter member; use one of"):
        optional_member(plain, "lowers")

"""``NAME[key=value,...]``: one syntax for a built-in subject with options, wherever a name goes."""

from __future__ import annotations

import pytest

from conformance.plan.subjects import impl_names, resolve_subjects
from kernels.contract.subject_spec import SubjectSpec, SubjectSyntaxError, parse_subject, split_subjects
from kernels.registry import UnknownSubjectError, resolve, resolve_many


@pytest.mark.parametrize(
    "text, spec",
    [
        ("tpu_flash", SubjectSpec("tpu_flash")),
        (" tpu_flash[interpreter=tpu] ", SubjectSpec("tpu_flash", (("interpreter", "tpu"),))),
        ("splash[b=2, a=1]", SubjectSpec("splash", (("a", "1"), ("b", "2")))),  # sorted: one name
        ("pkg.mod:fn", SubjectSpec("pkg.mod:fn")),
    ],
)
def test_parse(text, spec):
    assert parse_subject(text) == spec
    assert parse_subject(spec.text) == spec


@pytest.mark.parametrize(
    "text, message",
    [
        ("tpu_flash[interpreter]", "must read key=value"),
        ("tpu_flash[=tpu]", "must read key=value"),
        ("tpu_flash[]", "empty brackets"),
        ("tpu_flash[a=1,a=2]", "given twice"),
        ("tpu_flash[a=1", "NAME or NAME"),
    ],
)
def test_bad_syntax_is_one_line_naming_the_fix(text, message):
    with pytest.raises(SubjectSyntaxError, match=message) as error:
        parse_subject(text)
    assert "\n" not in str(error.value)


def test_commas_inside_brackets_separate_options_not_subjects():
    assert split_subjects("tpu_flash[interpreter=tpu,x=1], xla,") == ["tpu_flash[interpreter=tpu,x=1]", "xla"]
    for bad in ("tpu_flash[interpreter=tpu", "xla]"):
        with pytest.raises(SubjectSyntaxError):
            split_subjects(bad)


def test_an_option_names_the_subject_and_reaches_the_adapter():
    adapter = resolve("tpu_flash[interpreter=tpu]")
    assert adapter.interpreter == "tpu" and adapter.name == "tpu_flash[interpreter=tpu]"
    assert resolve("tpu_flash", interpreter="tpu").name == "tpu_flash[interpreter=tpu]"
    assert resolve("splash[interpreter=tpu]").name == "splash[interpreter=tpu]"
    # the default is the plain subject: one name for one configuration
    assert resolve("tpu_flash[interpreter=generic]").name == "tpu_flash"
    assert [a.name for a in resolve_many("tpu_flash[interpreter=tpu],xla")] == [
        "tpu_flash[interpreter=tpu]",
        "xla",
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("tpu_flash[interpreter=mosaic]", r"interpreter=mosaic is not one of generic\|tpu"),
        ("tpu_flash[block_q=64]", "tpu_flash has no option 'block_q'; it takes interpreter=generic|tpu"),
        ("xla[interpreter=tpu]", "xla has no option 'interpreter'; it takes no options"),
        ("pkg.mod:fn[interpreter=tpu]", "options only apply to built-in subjects"),
    ],
)
def test_an_option_a_subject_does_not_take_is_one_line(text, message):
    with pytest.raises(UnknownSubjectError, match=message):
        resolve(text)


def test_the_same_configuration_twice_is_refused():
    with pytest.raises(UnknownSubjectError, match="both called"):
        resolve_subjects("tpu_flash,tpu_flash[interpreter=generic]")


def test_all_adds_the_tpu_interpret_and_int8_variants_in_thorough_only():
    ci, dev, thorough = (impl_names("all", tier) for tier in ("ci", "dev", "thorough"))
    # the only names with options in ci are a family's members (one per implementation: tokamax[impl=...],
    # tokamax_splash[impl=...], tokamax_batched_rpa[impl=...]) and tokamax's ring under the config its
    # own test builds (the default config is a known defect: the other one keeps the ring judged)
    families = ("tokamax[impl=", "tokamax_splash[impl=", "tokamax_batched_rpa[impl=")
    assert all(
        name.startswith(families) for name in ci if "[" in name and name != "tokamax_ring[config=natural_exp]"
    )
    assert "tokamax_ring[config=natural_exp]" in ci
    assert not [name for name in dev if "[" in name and not name.startswith("tokamax")]
    assert set(thorough) - set(dev) == {
        "tpu_flash[interpreter=tpu]",
        "splash[interpreter=tpu]",
        "paged_attention[kv=int8]",
        # lowering only (the TPU interpreter cannot run it): 16 minutes of lowering at ci
        "tokamax_batched_rpa[impl=mosaic_tpu]",
    }
    assert resolve("tpu_flash[interpreter=tpu]").name in thorough

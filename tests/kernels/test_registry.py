"""The registry: built-in names, dotted-path functions, entry-point adapters, and errors."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import numpy as np
import pytest

from kernels import registry
from kernels.adapters.function_adapter import DEFAULT_CAPABILITIES, FunctionAdapter
from kernels.contract.base import Adapter, Capabilities
from kernels.registry import UnknownSubjectError, resolve, resolve_many, subject_names
from kernels.subjects import SUBJECTS
from reference.spec import AttentionSpec
from tests.kernels.cases import check_forward, make_inputs

BUILTINS = tuple(subject.name for subject in SUBJECTS)  # the catalogue, kernels/subjects.py


def test_builtin_names_are_listed_in_order():
    assert subject_names()[: len(BUILTINS)] == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_resolves_to_an_adapter_without_crashing(name):
    adapter = resolve(name)
    assert isinstance(adapter, Adapter)
    # a family's bare name is its default member, which names its implementation
    assert adapter.name == name or adapter.name == registry.expand_family(name)[0]
    availability = adapter.availability()  # must never raise, whatever is installed
    assert availability.available or availability.reason


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(UnknownSubjectError, match="unknown subject 'tpu_flsh'.*tpu_flash.*dotted path"):
        resolve("tpu_flsh")


def test_unknown_subject_error_is_a_value_error():
    assert issubclass(UnknownSubjectError, ValueError)


def test_resolve_many_all_and_commas():
    expanded = [member for name in BUILTINS for member in registry.expand_family(name)]
    assert [a.name for a in resolve_many("all")][: len(expanded)] == expanded
    assert [a.name for a in resolve_many("xla, cudnn")] == ["xla", "cudnn"]
    with pytest.raises(UnknownSubjectError, match="no subject given"):
        resolve_many("")


def test_options_reach_builtin_constructors_only():
    assert resolve("tpu_flash", interpreter="tpu").interpreter == "tpu"
    with pytest.raises(UnknownSubjectError, match="only apply to built-in"):
        resolve("mypkg.mod:fn", interpreter="tpu")


# --- dotted path ------------------------------------------------------------------------


def plain_attention(q, k, v, *, scale, causal=False, alignment="top_left", bias=None):
    """NumPy attention with the canonical signature (float32 in, float32 out)."""
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if bias is not None:
        s = s + bias
    if causal:
        sq, sk = s.shape[-2:]
        offset = 0 if alignment == "top_left" else sk - sq
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + offset, s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    out = np.einsum("bhqk,bhkd->bhqd", np.exp(s - lse[..., None]), v.astype(np.float64))
    return out.astype(q.dtype), lse.astype(np.float32)


plain_attention.attention_capabilities = Capabilities(
    dtypes=("float32",),
    causal_alignments=("top_left", "bottom_right"),
    bias=True,
    bias_broadcast=True,
    lse=True,
)


def minimal_attention(q, k, v, *, scale):
    """Returns out only, with no capability declaration: the conservative default applies."""
    return plain_attention(q, k, v, scale=scale)[0]


def test_dotted_path_function_runs_against_the_reference():
    adapter = resolve(f"{__name__}:plain_attention")
    assert isinstance(adapter, FunctionAdapter)
    assert adapter.description.startswith("NumPy attention")
    inputs = make_inputs(0, 1, 2, 2, 8, 12, 4, bias_shape=(1, 2, 1, 12))
    for spec in (AttentionSpec(), AttentionSpec(causal=True, alignment="bottom_right")):
        assert check_forward(adapter, inputs, spec, "float32") == f"{__name__}:plain_attention"


def test_dotted_path_without_declaration_gets_conservative_default():
    adapter = resolve(f"{__name__}:minimal_attention")
    assert adapter.capabilities() == DEFAULT_CAPABILITIES
    check_forward(adapter, make_inputs(1, 1, 1, 1, 4, 4, 8), AttentionSpec(), "float32")


def test_dotted_path_to_adapter_class_is_instantiated():
    adapter = resolve("kernels.adapters.xla:XlaAdapter")
    assert not isinstance(adapter, type)
    assert adapter.name == "xla"


@pytest.mark.parametrize(
    "path, message",
    [
        ("no_such_package_xyz.mod:fn", "cannot import module 'no_such_package_xyz.mod'"),
        (f"{__name__}:no_such_function", "has no attribute 'no_such_function'"),
        (f"{__name__}:BUILTINS", "is a tuple, not a function or adapter"),
        (":fn", "must look like 'package.module:function'"),
    ],
)
def test_bad_dotted_paths_say_what_is_wrong(path, message):
    with pytest.raises(UnknownSubjectError, match=message):
        resolve(path)


def two_arguments(q, k, *, scale):
    return q


def no_causal_keyword(q, k, v, *, scale):
    return q


no_causal_keyword.attention_capabilities = Capabilities(dtypes=("float32",), causal_alignments=("top_left",))


def claims_backward(q, k, v, **kwargs):
    return q


claims_backward.attention_capabilities = Capabilities(dtypes=("float32",), backward=True)


def bad_declaration(q, k, v, *, scale):
    return q


bad_declaration.attention_capabilities = {"dtypes": ("float32",)}


def needs_extra(q, k, v, extra, *, scale):
    return q


@pytest.mark.parametrize(
    "function, message",
    [
        ("two_arguments", r"takes 2 positional parameters; the canonical signature is fn\(q, k, v"),
        ("no_causal_keyword", r"does not accept keyword\(s\) \['causal', 'alignment'\]"),
        ("claims_backward", "forward-only"),
        ("bad_declaration", "must be a kernels.contract.base.Capabilities"),
        ("needs_extra", r"required parameter\(s\) \['extra'\] are never passed"),
    ],
)
def test_wrong_signatures_are_rejected_with_the_fix(function, message):
    with pytest.raises(UnknownSubjectError, match=message):
        resolve(f"{__name__}:{function}")


def test_function_declaring_lse_must_return_it():
    def out_only(q, k, v, *, scale):
        return q

    out_only.attention_capabilities = Capabilities(dtypes=("float32",), lse=True)
    adapter = FunctionAdapter.wrap(out_only, "out_only")
    with pytest.raises(TypeError, match="declares lse=True but returned only out"):
        adapter.forward(make_inputs(0, 1, 1, 1, 4, 4, 4), AttentionSpec())


# --- entry points -----------------------------------------------------------------------


def _fake_entry_points(monkeypatch, *entries: tuple[str, str]) -> None:
    eps = importlib.metadata.EntryPoints(
        importlib.metadata.EntryPoint(name, value, registry.ENTRY_POINT_GROUP) for name, value in entries
    )

    def entry_points(**params):
        return eps.select(**params)

    monkeypatch.setattr(registry.importlib.metadata, "entry_points", entry_points)


def test_entry_point_adapter_is_listed_and_resolved(monkeypatch):
    _fake_entry_points(monkeypatch, ("my_xla", "kernels.adapters.xla:XlaAdapter"))
    assert "my_xla" in subject_names()
    adapter = resolve("my_xla")
    assert not isinstance(adapter, type), "the class must be instantiated, not returned"
    assert adapter.name == "xla"
    # a family (tokamax) is one subject per implementation
    builtins = sum(len(registry.expand_family(name)) for name in BUILTINS)
    assert "my_xla" in [a.name for a in resolve_many("all")] or len(resolve_many("all")) == builtins + 1


def test_entry_point_that_fails_to_load_names_itself(monkeypatch):
    _fake_entry_points(monkeypatch, ("broken", "no_such_package_xyz:Adapter"))
    with pytest.raises(UnknownSubjectError, match="entry point 'broken'.*failed to load"):
        resolve("broken")


def test_entry_point_to_non_adapter_is_rejected(monkeypatch):
    _fake_entry_points(monkeypatch, ("not_adapter", "collections:OrderedDict"))
    with pytest.raises(UnknownSubjectError, match="is not an adapter"):
        resolve("not_adapter")


def test_builtin_names_win_over_entry_points(monkeypatch):
    _fake_entry_points(monkeypatch, ("xla", "collections:OrderedDict"))
    assert subject_names().count("xla") == 1
    assert resolve("xla").name == "xla"


def test_real_entry_point_from_an_installed_distribution(tmp_path, monkeypatch):
    """A dist-info on sys.path is found by importlib.metadata exactly like an installed plug-in."""
    package = tmp_path / "my_attention_plugin"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        from kernels.adapters.xla import XlaAdapter

        def make():
            return XlaAdapter(name="plugin_xla", description="XLA through an entry point")
    """)
    )
    dist = tmp_path / "my_attention_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-attention-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\nplugin_xla = my_attention_plugin:make\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "plugin_xla" in subject_names()
        adapter = resolve("plugin_xla")
        assert adapter.name == "plugin_xla"
        check_forward(adapter, make_inputs(2, 1, 2, 2, 8, 8, 4), AttentionSpec(causal=True), "float32")
    finally:
        sys.modules.pop("my_attention_plugin", None)

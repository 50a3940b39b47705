"""Capability declarations are well-formed and consistent, for every built-in subject."""

from __future__ import annotations

import pytest

from kernels.contract.base import Capabilities
from kernels.registry import BUILTIN, resolve
from kernels.runtime.jax_runtime import default_backend
from reference.spec import AttentionShape, AttentionSpec
from tests.kernels.cases import make_inputs


@pytest.mark.parametrize("name", BUILTIN)
def test_declarations_are_well_formed(name):
    capabilities = resolve(name).capabilities()  # must not raise, available or not
    assert isinstance(capabilities, Capabilities)
    assert capabilities.dtypes
    if capabilities.bias_grad:
        assert capabilities.bias and capabilities.backward
    if capabilities.bias_broadcast:
        assert capabilities.bias
    names = [c.name for c in capabilities.constraints]
    assert len(names) == len(set(names)), "constraint names must be unique"
    for constraint in capabilities.constraints:
        assert constraint.reason.strip() and len(constraint.reason.split()) >= 5, constraint.name
        # holds() must answer for any shape, without raising.
        for shape in (AttentionShape(1, 1, 1, 1, 1, 8, 8), AttentionShape(2, 4, 2, 256, 384, 128, 64)):
            assert isinstance(
                constraint.satisfied(shape, AttentionSpec(causal=True), capabilities.tunables.resolved(())),
                bool,
            )


def test_window_alignment_must_be_declared_when_it_matters():
    capabilities = Capabilities(dtypes=("float32",), causal_alignments=("top_left",), window=True)
    square = make_inputs(0, 1, 1, 1, 8, 8, 4)
    longer_kv = make_inputs(0, 1, 1, 1, 8, 12, 4)
    bottom_right = AttentionSpec(window=(2, 1), alignment="bottom_right")
    assert capabilities.unsupported_reason(square, bottom_right, "float32") is None
    reason = capabilities.unsupported_reason(longer_kv, bottom_right, "float32")
    assert "window alignment bottom_right" in reason
    assert capabilities.unsupported_reason(longer_kv, AttentionSpec(window=(2, 1)), "float32") is None


@pytest.mark.skipif(default_backend() != "cpu", reason="the float16 exclusion is specific to XLA:CPU")
def test_xla_float16_declared_exactly_where_it_works():
    """Keeps the exclusion honest: if a JAX release fixes float16 on CPU, declare it again."""
    adapter = resolve("xla")
    inputs = make_inputs(0, 1, 1, 1, 8, 8, 8, dtype="float16")
    if "float16" in adapter.capabilities().dtypes:
        adapter.forward(inputs, AttentionSpec())
        return
    with pytest.raises(Exception, match="not supported|F16"):
        adapter.forward(inputs, AttentionSpec())

"""The declaration rule: a constraint states what the API rejects (it raises) or cannot express
(``api``). "It returns wrong numbers there" is never a declaration: such cases run, fail, and get a
known-issue entry. Checked for every built-in subject at the installed JAX (``nox -k kernels``
runs it at every version of the matrix)."""

from __future__ import annotations

import re

import pytest

from kernels.contract.base import CONSTRAINT_BASES, ShapeConstraint
from kernels.registry import BUILTIN, resolve

# Words of a reason that describe wrong results rather than a rejection or a missing parameter.
_DEFECT_WORDS = re.compile(r"\b(undefined|garbage|wrong|incorrect|reads? past|out of bounds|nan)\b", re.I)
# Words of a raising reason that name the exception (what the raises check expects).
_EXCEPTION_WORDS = re.compile(r"\b\w*(Error|Exception)\b|\braises?\b")


def _constraints(name: str) -> tuple[ShapeConstraint, ...]:
    return resolve(name).capabilities().constraints


@pytest.mark.parametrize("name", BUILTIN)
def test_every_constraint_states_a_basis_that_is_not_a_defect(name):
    for constraint in _constraints(name):
        assert constraint.basis in CONSTRAINT_BASES, constraint.name
        assert not _DEFECT_WORDS.search(constraint.reason), (
            f"{name}.{constraint.name} declares a defect away ({constraint.reason!r}); let the cases "
            "run and add a known-issue entry instead"
        )
        if constraint.raises:
            assert _EXCEPTION_WORDS.search(constraint.reason), (
                f"{name}.{constraint.name}: a raising constraint names what it raises"
            )


@pytest.mark.parametrize("name", BUILTIN)
def test_no_builtin_constraint_skips_cases_without_a_raise_or_a_missing_parameter(name):
    non_raising = [c for c in _constraints(name) if not c.raises]
    assert all(c.basis == "api" for c in non_raising), [c.name for c in non_raising]
    for constraint in non_raising:
        assert re.search(r"\b(no|not|cannot|missing)\b", constraint.reason), (
            f"{name}.{constraint.name}: an api constraint names the parameter that is missing"
        )


def test_a_constraint_without_a_basis_cannot_be_written():
    with pytest.raises(TypeError):
        ShapeConstraint("x", "a reason of five words", lambda shape, spec: True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="known-issue entry"):
        ShapeConstraint("x", "a reason of five words", lambda shape, spec: True, basis="undefined")  # type: ignore[arg-type]


def test_a_feature_scoped_constraint_concerns_only_cases_with_that_feature():
    from kernels.contract.base import Capabilities
    from reference.spec import AttentionShape, AttentionSpec

    odd = ShapeConstraint(
        "even_with_bias",
        "with a bias the backward raises NotImplementedError",
        lambda shape, spec: shape.q_len % 2 == 0,
        basis="raises",
        features=("bias",),
    )
    caps = Capabilities(dtypes=("float32",), constraints=(odd,))
    shape = AttentionShape(1, 1, 1, 3, 4, 8, 8)
    with_bias = ("bias", "causal_top_left")
    assert caps.violated_constraints(shape, AttentionSpec(), "backward", with_bias) == (odd,)
    assert caps.violated_constraints(shape, AttentionSpec(), "backward", ("causal_top_left",)) == ()

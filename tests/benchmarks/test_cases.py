"""Case planning honours each adapter's declarations and availability."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.cases import order_key, plan_subject, skip_reason
from benchmarks.shapes import BenchShape
from kernels.adapters.xla import XlaAdapter
from kernels.contract.base import Availability, Capabilities, ShapeConstraint


@dataclasses.dataclass(frozen=True)
class _Fake:
    """An adapter that only describes itself; planning never calls it."""

    available: Availability
    caps: Capabilities
    name: str = "fake"
    description: str = "fake"

    def availability(self) -> Availability:
        return self.available

    def capabilities(self) -> Capabilities:
        return self.caps


ONE_TWENTY_EIGHT = ShapeConstraint(
    "len_128",
    "length must be a multiple of 128",
    lambda shape, spec: shape.q_len % 128 == 0,
    basis="api",
    applies_to="backward",
)


def test_declarations_give_the_skip_reason() -> None:
    caps = Capabilities(
        dtypes=("float32",), causal_alignments=("top_left",), backward=True, constraints=(ONE_TWENTY_EIGHT,)
    )
    assert skip_reason(caps, "forward", BenchShape(256, 64, "float32", True)) is None
    assert "bfloat16" in skip_reason(caps, "forward", BenchShape(256, 64, "bfloat16", False))
    assert skip_reason(caps, "forward", BenchShape(200, 64, "float32", False)) is None  # forward-only rule
    assert skip_reason(caps, "forward_backward", BenchShape(200, 64, "float32", False)).startswith("len_128")
    no_backward = dataclasses.replace(caps, backward=False)
    assert "backward" in skip_reason(no_backward, "forward_backward", BenchShape(256, 64, "float32", False))
    no_causal = Capabilities(dtypes=("float32",))
    assert "causal" in skip_reason(no_causal, "forward", BenchShape(256, 64, "float32", True))


def test_interpreted_subject_gets_the_interpret_list_with_its_execution() -> None:
    adapter = _Fake(
        Availability(True, "", (), "interpret", "Pallas generic interpreter (interpret=True) on CPU"),
        Capabilities(dtypes=("float32", "bfloat16"), causal_alignments=("top_left",), backward=True),
    )
    planned = plan_subject("fake", adapter, "cpu")
    cases = [p.case for p in planned]
    assert {c.shape_list for c in cases} == {"interpret"}
    assert {c.execution for c in cases} == {"interpret"}
    assert {c.mode for c in cases} == {"forward", "forward_backward", "compile"}
    assert all(p.skip is None for p in planned)
    native_only = plan_subject("fake", adapter, "cpu", execution_filter="native")
    assert len(native_only) == 1 and native_only[0].case is None and "interpret" in native_only[0].skip


def test_unavailable_subject_is_one_skip_with_its_reason() -> None:
    adapter = _Fake(Availability(False, "needs an NVIDIA GPU"), Capabilities(dtypes=("float32",)))
    [planned] = plan_subject("fake", adapter, "cpu")
    assert planned.case is None and planned.id == "fake-unavailable" and "NVIDIA GPU" in planned.skip


@pytest.mark.parametrize(("platform", "expected"), [("cpu", "cpu"), ("gpu", "accelerator")])
def test_native_subject_list_follows_the_platform(platform: str, expected: str) -> None:
    planned = plan_subject("xla", XlaAdapter(), platform)
    assert {p.case.shape_list for p in planned} == {expected}
    assert {p.case.execution for p in planned} == {"native"}
    assert len({p.id for p in planned}) == len(planned)
    assert planned[0].id.startswith("xla-forward-")


def test_order_puts_unavailable_first_then_ascending_sizes() -> None:
    planned = plan_subject("xla", XlaAdapter(), "cpu")
    planned += plan_subject("gone", _Fake(Availability(False, "x"), Capabilities(dtypes=("float32",))), "cpu")
    ordered = sorted(planned, key=order_key)
    assert ordered[0].case is None
    lengths = [p.case.shape.length for p in ordered[1:]]
    assert lengths == sorted(lengths)


def test_execution_is_the_declared_literal_not_a_word_in_the_detail() -> None:
    caps = Capabilities(dtypes=("float32",), causal_alignments=("top_left",))
    native = _Fake(Availability(True, "", (), "native", "compiled ahead, no interpreter"), caps)
    assert {p.case.execution for p in plan_subject("fake", native, "cpu")} == {"native"}
    assert {p.case.execution_detail for p in plan_subject("fake", native, "cpu")} == {
        "compiled ahead, no interpreter"
    }
    interpreted = _Fake(Availability(True, "", (), "interpret", "emulated"), caps)
    assert {p.case.execution for p in plan_subject("fake", interpreted, "cpu")} == {"interpret"}


def test_execution_outside_the_literal_is_refused() -> None:
    with pytest.raises(ValueError, match="execution_detail"):
        Availability(True, "", (), "Pallas generic interpreter (interpret=True) on CPU")  # type: ignore[arg-type]

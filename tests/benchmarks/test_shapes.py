"""Shape lists: which one a subject gets, and that each covers the representative axes (lengths up to
4096, D 64 and 128, causal and not, float32 and bfloat16) within its budget."""

from __future__ import annotations

import pytest

from benchmarks.shapes import LIST_NAMES, BenchShape, select_shape_list, shape_list


@pytest.mark.parametrize(
    ("execution", "platform", "expected"),
    [
        ("interpret", "cpu", "interpret"),
        ("interpret", "gpu", "interpret"),  # an interpreted kernel on a GPU is still the interpreter
        ("native", "cpu", "cpu"),
        ("native", "gpu", "accelerator"),
        ("native", "tpu", "accelerator"),
    ],
)
def test_list_is_selected_by_execution_then_platform(execution: str, platform: str, expected: str) -> None:
    assert select_shape_list(execution, platform) == expected


@pytest.mark.parametrize("name", ["interpret", "cpu", "accelerator"])
def test_lists_cover_the_representative_axes(name: str) -> None:
    shapes = shape_list(name).shapes
    assert {s.head_dim for s in shapes} == {64, 128}
    assert {s.causal for s in shapes} == {False, True}
    assert {s.dtype for s in shapes} == {"float32", "bfloat16"}
    assert len({s.length for s in shapes}) >= 3
    assert len({s.id for s in shapes}) == len(shapes), "ids are the gate's pairing keys: no duplicates"


def test_interpret_list_is_budgeted_and_native_lists_reach_4096() -> None:
    assert max(s.length for s in shape_list("interpret").shapes) <= 1024
    assert max(s.length for s in shape_list("cpu").shapes) == 4096
    assert max(s.length for s in shape_list("accelerator").shapes) == 4096
    # the accelerator list is the full product: 4 lengths x 2 D x causal x 2 dtypes
    assert len(shape_list("accelerator").shapes) == 32


@pytest.mark.parametrize("name", LIST_NAMES)
def test_lists_run_smallest_first(name: str) -> None:
    sizes = [s.batch * s.heads * s.length for s in shape_list(name).shapes]
    assert sizes == sorted(sizes)
    assert shape_list(name).compile_shapes


def test_unknown_list_names_the_choices() -> None:
    with pytest.raises(ValueError, match="interpret"):
        shape_list("huge")


def test_shape_id_and_inputs() -> None:
    shape = BenchShape(256, 64, "bfloat16", True, batch=1, heads=2)
    assert shape.id == "bf16-B1-H2-S256-D64-causal"
    inputs = shape.inputs()
    assert inputs.q.shape == (1, 2, 256, 64) and str(inputs.q.dtype) == "bfloat16"
    assert shape.placeholder_inputs().shape == inputs.shape
    assert shape.spec(("bottom_right",)).alignment == "bottom_right"  # Sq == Sk: either alignment

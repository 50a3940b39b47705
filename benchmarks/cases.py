"""Benchmark cases: subject x mode x shape, planned from what each adapter declares.

A case outside an adapter's declared ``Capabilities`` or ``ShapeConstraint``s is kept
(its id stays stable across versions) and skipped with the declaration's own reason,
never run to see whether it fails: a conformance question, not a speed one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from benchmarks.shapes import BenchShape, Execution, numpy_dtype, select_shape_list, shape_list
from kernels.contract.base import Adapter, Capabilities

Mode = Literal["forward", "forward_backward", "compile"]
MODES: tuple[Mode, ...] = ("forward", "forward_backward", "compile")
EXECUTION_FILTERS = ("all", "native", "interpret")


@dataclasses.dataclass(frozen=True)
class BenchCase:
    """One benchmark. ``execution`` is what the gate pairs on; ``shape_list`` says why this shape."""

    subject: str
    mode: Mode
    shape: BenchShape
    execution: Execution
    execution_detail: str
    shape_list: str

    @property
    def id(self) -> str:
        """``xla-forward-bf16-B1-H2-S1024-D128-causal``: the test id, hence the gate's pairing key."""
        return f"{self.subject}-{self.mode}-{self.shape.id}"


@dataclasses.dataclass(frozen=True)
class PlannedCase:
    """A case to run (``skip`` is None) or to report as skipped, with the reason."""

    id: str
    case: BenchCase | None
    skip: str | None = None


def plan_subject(
    name: str, adapter: Adapter, platform: str, list_name: str = "auto", execution_filter: str = "all"
) -> list[PlannedCase]:
    """Every case of one subject, in the order they should run (smallest shapes first).

    platform: JAX's default backend ("cpu", "gpu", "tpu"); list_name: "auto" picks the
    list by execution and platform (``shapes.select_shape_list``), else a name from
    ``shapes.LIST_NAMES``; execution_filter: "native" or "interpret" skips the other kind.
    """
    availability = adapter.availability()
    if not availability.available:
        return [PlannedCase(f"{name}-unavailable", None, f"{name} unavailable: {availability.reason}")]
    execution = availability.execution
    if execution_filter not in ("all", execution):
        return [
            PlannedCase(
                f"{name}-{execution}",
                None,
                f"{name} runs in {execution} mode ({availability.execution_detail}); this run benchmarks "
                f"{execution_filter} subjects only",
            )
        ]
    chosen = shape_list(select_shape_list(execution, platform) if list_name == "auto" else list_name)
    capabilities = adapter.capabilities()
    planned = []
    for mode in MODES:
        for shape in chosen.compile_shapes if mode == "compile" else chosen.shapes:
            case = BenchCase(name, mode, shape, execution, availability.execution_detail, chosen.name)
            planned.append(PlannedCase(case.id, case, skip_reason(capabilities, mode, shape)))
    return planned


def skip_reason(capabilities: Capabilities, mode: Mode, shape: BenchShape) -> str | None:
    """Why the adapter's declarations exclude this case, or None when it may run."""
    if mode == "forward_backward" and not capabilities.backward:
        return "the adapter declares no backward pass (Capabilities.backward is False)"
    if shape.causal and not capabilities.causal_alignments:
        return "the adapter declares no causal mask"
    spec = shape.spec(capabilities.causal_alignments)
    directions: Sequence[Literal["forward", "backward"]] = (
        ("forward", "backward") if mode == "forward_backward" else ("forward",)
    )
    for direction in directions:
        outside = capabilities.admits(shape.placeholder_inputs(), spec, shape.dtype, direction)
        if outside:
            return outside[0].text
    return None


def order_key(planned: PlannedCase) -> tuple:
    """Run order across subjects: unavailable subjects first, then by size (see ``shapes._ordered``)
    with the modes of one shape together, so that most benchmarks raise the device's peak mark."""
    if planned.case is None:
        return (0,)
    s = planned.case.shape
    itemsize = numpy_dtype(s.dtype).itemsize
    return (1, s.batch * s.heads * s.length, s.head_dim, itemsize, MODES.index(planned.case.mode))

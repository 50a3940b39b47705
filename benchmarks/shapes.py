"""Benchmark shapes: what each subject is timed at, chosen by how it executes.

Every shape is self-attention (``Sq = Sk = length``), one kv head per query head,
no bias or masks beyond causal: the representative case every subject supports.

Three lists, selected by ``select_shape_list(execution, platform)``:

* ``interpret``: a kernel run by the Pallas interpreter (on CPU, or anywhere it is not
  native). The interpreter is slow: each new shape costs 1-5 s to trace and compile
  on 2 cores, more for backward, and a forward call at S=1024 about 0.1 s. So lengths
  stop at 1024, batch x heads is 1 x 2, D x causal x dtype is a half fraction (4 of
  the 8 combinations, each level of each axis twice, every pair of axes' levels once)
  at S=256, and one configuration sweeps the lengths. 8 shapes in all.
  These timings describe the interpreter, not the kernel.
* ``cpu``: a native subject on a CPU (XLA attention). Lengths up to 4096, but a
  sparse design at 1 x 2 (batch x heads) keeps the whole CPU run near 5 minutes on
  2 cores: every D x causal x dtype combination at one length, plus two lengths sweeps.
* ``accelerator``: a native subject on a GPU or TPU: the full product of
  lengths {512, 1024, 2048, 4096} x D {64, 128} x causal x dtype at 2 x 8.

``smoke`` (one tiny shape) exists for the project's own tests. Compile time is
measured on ``compile_shapes``: a short length, where the first call is mostly compile.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable

import numpy as np

from kernels.contract.base import Execution
from reference.spec import AttentionInputs, AttentionSpec

LIST_NAMES = ("interpret", "cpu", "accelerator", "smoke")
_DTYPE_TAGS = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64"}


@dataclasses.dataclass(frozen=True, order=True)
class BenchShape:
    """One benchmark shape. ``q, k, v: [batch, heads, length, head_dim]`` in ``dtype``."""

    length: int
    head_dim: int
    dtype: str
    causal: bool
    batch: int = 1
    heads: int = 2

    @property
    def id(self) -> str:
        """Reads like the case: ``bf16-B1-H2-S1024-D128-causal``; part of the gate's pairing key."""
        mask = "causal" if self.causal else "full"
        tag = _DTYPE_TAGS.get(self.dtype, self.dtype)
        return f"{tag}-B{self.batch}-H{self.heads}-S{self.length}-D{self.head_dim}-{mask}"

    @property
    def dims(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.length, self.head_dim)

    @property
    def forward_flops(self) -> int:
        """Dense matmul flops of one forward call, 4*B*H*S*S*D (causal counted dense too)."""
        return 4 * self.batch * self.heads * self.length * self.length * self.head_dim

    def spec(self, alignments: tuple[str, ...] = ("top_left",)) -> AttentionSpec:
        """The spec; with Sq == Sk both causal alignments mean the same mask, so any declared one does."""
        alignment = alignments[0] if (self.causal and alignments) else "top_left"
        return AttentionSpec(causal=self.causal, alignment=alignment)

    def inputs(self, seed: int = 0) -> AttentionInputs:
        """Standard-normal q, k, v rounded to ``dtype`` (the values do not matter for speed)."""
        rng = np.random.default_rng(seed)
        dtype = numpy_dtype(self.dtype)
        q, k, v = (rng.standard_normal(self.dims, dtype=np.float32).astype(dtype) for _ in range(3))
        return AttentionInputs(q, k, v)

    def placeholder_inputs(self) -> AttentionInputs:
        """Inputs with the right shapes and dtype but no memory (broadcast views), for declarations."""
        zero = np.zeros((), dtype=numpy_dtype(self.dtype))
        view = np.broadcast_to(zero, self.dims)
        return AttentionInputs(view, view, view)


@dataclasses.dataclass(frozen=True)
class ShapeList:
    """A named, documented set of shapes, with the time each benchmark may spend on rounds."""

    name: str
    shapes: tuple[BenchShape, ...]
    compile_shapes: tuple[BenchShape, ...]
    target_s: float  # rounds are chosen so that the timed part takes about this long ...
    min_rounds: int = 3  # ... but never fewer rounds than this (a median needs a few) ...
    max_rounds: int = 500  # ... nor more than this (fast calls get many: a median of few is noise)
    compile_rounds: int = 3  # fresh-adapter first calls per compile benchmark


def grid(
    lengths: Iterable[int],
    head_dims: Iterable[int],
    causal: Iterable[bool],
    dtypes: Iterable[str],
    batch: int,
    heads: int,
) -> tuple[BenchShape, ...]:
    """The product of the axes, as shapes."""
    return tuple(
        BenchShape(s, d, t, c, batch, heads)
        for s, d, c, t in itertools.product(lengths, head_dims, causal, dtypes)
    )


def _sparse(
    batch: int,
    heads: int,
    product_at: int,
    sweep: tuple[int, ...],
    sweep_configs: tuple[tuple[int, bool, str], ...],
    half: bool = False,
) -> tuple[BenchShape, ...]:
    """D x causal x dtype at one length (all 8, or the half fraction where causal iff
    (D == 64) == (dtype == bfloat16)), plus length sweeps of a few (D, causal, dtype)."""
    every = grid([product_at], (64, 128), (False, True), ("float32", "bfloat16"), batch, heads)
    if half:
        every = tuple(s for s in every if s.causal == ((s.head_dim == 64) == (s.dtype == "bfloat16")))
    sweeps = tuple(BenchShape(s, d, t, c, batch, heads) for d, c, t in sweep_configs for s in sweep)
    return _ordered(every + sweeps)


def _ordered(shapes: Iterable[BenchShape]) -> tuple[BenchShape, ...]:
    """Smallest first, duplicates dropped. Ascending sizes let most benchmarks raise the device's
    (never reset) peak-memory mark, so their peak reading is their own (see ``memory``)."""
    return tuple(sorted(set(shapes), key=lambda s: (s.batch * s.heads * s.length, s.head_dim, s)))


def shape_list(name: str) -> ShapeList:
    """The named list (one of ``LIST_NAMES``); built on demand, so nothing module-level can be mutated."""
    if name == "interpret":
        return ShapeList(
            name,
            _sparse(1, 2, 256, (128, 256, 512, 1024), ((128, True, "bfloat16"),), half=True),
            (BenchShape(256, 128, "bfloat16", True), BenchShape(256, 64, "float32", False)),
            target_s=0.3,
        )
    if name == "cpu":
        return ShapeList(
            name,
            _sparse(1, 2, 1024, (256, 2048, 4096), ((128, True, "bfloat16"), (64, False, "float32"))),
            (BenchShape(256, 128, "bfloat16", True), BenchShape(256, 64, "float32", False)),
            target_s=0.3,
        )
    if name == "accelerator":
        return ShapeList(
            name,
            _ordered(grid((512, 1024, 2048, 4096), (64, 128), (False, True), ("float32", "bfloat16"), 2, 8)),
            _ordered(grid((512,), (64, 128), (False, True), ("float32", "bfloat16"), 2, 8)),
            target_s=0.5,
            max_rounds=1000,
        )
    if name == "smoke":
        tiny = BenchShape(128, 64, "float32", False, 1, 1)
        return ShapeList(name, (tiny,), (tiny,), target_s=0.05, min_rounds=2, max_rounds=3, compile_rounds=2)
    raise ValueError(f"unknown shape list {name!r}; use one of {LIST_NAMES} or 'auto'")


def select_shape_list(execution: Execution, platform: str) -> str:
    """``interpret`` for interpreted kernels; else ``cpu`` or ``accelerator`` by JAX's platform."""
    if execution == "interpret":
        return "interpret"
    return "cpu" if platform == "cpu" else "accelerator"


def numpy_dtype(name: str) -> np.dtype:
    """A dtype name -> NumPy dtype; bfloat16 comes from ml_dtypes (a JAX dependency)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)

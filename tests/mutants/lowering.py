"""Kernels only an interpreter accepts, or that a profiler cannot see: right attention (plain JAX,
``tests.mutants.jax_attention``) copied out through a one-operand Pallas TPU kernel.

* ``LoweringCopy`` (control): blocks of 128 rows, a kernel name and a cost estimate that
  claims the attention's flops; it lowers for TPU and passes lowers, vmem and observable.
* ``HundredRowBlocks``: blocks of 100 rows. The generic interpreter copies them fine (every
  numeric check passes); Mosaic tiles rows by 8 and rejects it. Only ``lowers`` can tell.
* ``NoCostEstimate``: the control without ``cost_estimate``: XLA and profilers see the kernel
  as free. Only ``observable`` can tell.
* ``ConfiguredCopy`` (control): the copy's row block is a tunable (``block_rows``, declared to
  show as the kernel's block rows), and a case's config sets it.
* ``IgnoresConfig``: the same declaration, but the kernel always runs its default 128 rows, as a
  wrapper that drops the config it is given. Every number is right; only ``config_applied``,
  reading the traced pallas_call's block shape, can tell.
* ``TritonCopy`` (control): the output through a Pallas Triton kernel (x @ I in pipelined chunks),
  lowered for CUDA; ``PipelinedTooDeep``: the same with 8 stages, over Hopper's shared memory. Only
  ``smem`` can tell.

The copy runs in the generic interpreter (``interpret=True``), so every JAX version runs it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from kernels.contract.tunables import BlockDim, Config, Tunable, Tunables
from kernels.hardware.lowering import LoweringCall, abstract_arrays
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core
from tests.mutants.correct import keywords


def _copy(x: jax.Array, *, rows: int, flops: int, moved: int, estimate: bool, interpret: bool) -> jax.Array:
    """x ``[..., D]`` through a Pallas kernel that copies blocks of ``rows`` rows of the
    flattened ``[N, D]`` array (padded to a whole number of blocks). Its cost estimate claims
    the attention's ``flops`` and bytes ``moved``: the kernel stands for the whole attention."""
    from jax.experimental import pallas as pl

    flat = x.reshape(-1, x.shape[-1])
    padded = jnp.pad(flat, ((0, -flat.shape[0] % rows), (0, 0)))

    def copy_attention_output(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    spec = pl.BlockSpec((rows, padded.shape[1]), lambda i: (i, 0))
    cost = pl.CostEstimate(flops=flops, transcendentals=0, bytes_accessed=moved)
    out = pl.pallas_call(
        copy_attention_output,
        grid=(padded.shape[0] // rows,),
        in_specs=[spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(padded.shape, padded.dtype),
        interpret=interpret,
        **({"cost_estimate": cost} if estimate else {}),
    )(padded)
    return out[: flat.shape[0]].reshape(x.shape)


@functools.partial(jax.jit, static_argnames=("rows", "estimate", "interpret", *core.STATIC))
def _forward(q, k, v, *, rows: int, estimate: bool, interpret: bool, **static):
    b, hq, sq, d = q.shape
    flops = 2 * b * hq * sq * k.shape[2] * (d + v.shape[-1])
    moved = 4 * (q.size + k.size + v.size + b * hq * sq * v.shape[-1])  # float32
    out = core.attention(q, k, v, **static)[0]
    return _copy(out, rows=rows, flops=flops, moved=moved, estimate=estimate, interpret=interpret)


@dataclasses.dataclass(frozen=True, eq=False)
class LoweringCopy:
    """Right attention (float32, causal top-left, GQA), copied out in blocks of 128 rows."""

    ROWS: ClassVar[int] = 128
    ESTIMATE: ClassVar[bool] = True
    name: str = "mutants_lowering_copy"
    description: str = "JAX attention copied out through a Pallas TPU kernel (blocks of 128 rows)"

    def availability(self) -> Availability:
        return Availability(True, "", (), "interpret", "Pallas generic interpreter (interpret=True) on CPU")

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            dtypes=("float32",),
            causal_alignments=("top_left",),
            gqa=True,
            lowers_for="tpu",
        )

    def _fn(self, inputs: AttentionInputs, spec: AttentionSpec, interpret: bool):
        static = {n: v for n, v in keywords(inputs, spec).items() if n in core.STATIC}
        # one jitted function with static options: a second same-shape call must not recompile
        return functools.partial(
            _forward, rows=self.ROWS, estimate=self.ESTIMATE, interpret=interpret, **static
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        out = self._fn(inputs, spec, interpret=True)(
            *(jnp.asarray(a, jnp.float32) for a in (inputs.q, inputs.k, inputs.v))
        )
        return SubjectOutput(out=core.host(out, inputs.q.dtype), ran=self.name)

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        return LoweringCall(
            "tpu", self._fn(inputs, spec, interpret=False), abstract_arrays(inputs.q, inputs.k, inputs.v)
        )

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("no backward pass declared")


@dataclasses.dataclass(frozen=True, eq=False)
class HundredRowBlocks(LoweringCopy):
    """BUG: blocks of 100 rows; a TPU tiles rows by 8, so Mosaic refuses what the interpreter ran."""

    ROWS: ClassVar[int] = 100
    name: str = "mutants_hundred_row_blocks"


@dataclasses.dataclass(frozen=True, eq=False)
class NoCostEstimate(LoweringCopy):
    """BUG: the pallas_call passes no cost_estimate: XLA schedules it as free, profiles show nothing."""

    ESTIMATE: ClassVar[bool] = False
    name: str = "mutants_no_cost_estimate"


# The copy's row block: rows of the flattened [B * Hq * Sq, D] output (a q-axis block, multiples of
# a sublane tile), shown as the rows (second from last) of the kernel's input block.
BLOCK_ROWS = Tunables(
    (
        Tunable(
            "block_rows", 128, "q", multiple_of=8, blocks=(BlockDim("copy_attention_output", "args[0]", -2),)
        ),
    )
)


@dataclasses.dataclass(frozen=True, eq=False)
class ConfiguredCopy(LoweringCopy):
    """The copy with its row block tuned by the case's config (``block_rows``)."""

    config: Config = ()
    name: str = "mutants_configured_copy"
    description: str = "JAX attention copied out through a Pallas TPU kernel (tunable row blocks)"

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities(), tunables=BLOCK_ROWS)

    def configured(self, config: Config) -> ConfiguredCopy:
        return dataclasses.replace(self, config=BLOCK_ROWS.normalized(config))

    def _rows(self) -> int:
        return int(BLOCK_ROWS.value(self.config, "block_rows"))

    def _fn(self, inputs: AttentionInputs, spec: AttentionSpec, interpret: bool):
        rows = self._rows()
        static = {n: v for n, v in keywords(inputs, spec).items() if n in core.STATIC}
        return functools.partial(_forward, rows=rows, estimate=self.ESTIMATE, interpret=interpret, **static)


@dataclasses.dataclass(frozen=True, eq=False)
class IgnoresConfig(ConfiguredCopy):
    """BUG: declares block_rows but always copies in its default 128 rows: the config is dropped."""

    name: str = "mutants_ignores_config"

    def _rows(self) -> int:
        return int(BLOCK_ROWS.get("block_rows").default)  # BUG: the case's config is never read


# --- GPU shared memory: the copy through a Pallas Triton kernel ------------------------------------
# The output passes through ``o = x @ I`` on the GPU side: each (16-row) block of x times the
# identity, taken in chunks of CHUNK of its rows loaded inside a loop, so Triton stages each chunk
# in shared memory, ``num_stages`` deep. x @ I is exact, so every number stays right.
CHUNK = 64
TRITON_ROWS = 16


def _through_identity(x: jax.Array, *, stages: int, interpret: bool) -> jax.Array:
    """x ``[..., D]`` through a Triton kernel computing x @ I in chunks of ``CHUNK`` rows of I (D
    padded to a power of two)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    flat = x.reshape(-1, x.shape[-1]).astype(jnp.float32)
    d = max(16, 1 << (flat.shape[1] - 1).bit_length())  # Triton blocks: powers of two, at least 16
    padded = jnp.pad(flat, ((0, -flat.shape[0] % TRITON_ROWS), (0, d - flat.shape[1])))
    chunk = min(CHUNK, d)

    def identity_matmul(x_ref, eye_ref, o_ref):
        def step(carry, _):
            i, acc = carry
            part = jnp.dot(x_ref[:, pl.ds(i * chunk, chunk)], eye_ref[pl.ds(i * chunk, chunk), :])
            return (i + 1, acc + part), None

        start = (0, jnp.zeros((TRITON_ROWS, d), jnp.float32))
        o_ref[...] = jax.lax.scan(step, start, None, length=d // chunk)[0][1]

    out = pl.pallas_call(
        identity_matmul,
        grid=(padded.shape[0] // TRITON_ROWS,),
        in_specs=[pl.BlockSpec((TRITON_ROWS, d), lambda i: (i, 0)), pl.BlockSpec((d, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((TRITON_ROWS, d), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(padded.shape, jnp.float32),
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=stages),
        interpret=interpret,
        name="identity_matmul",
    )(padded, jnp.eye(d, dtype=jnp.float32))
    return out[: flat.shape[0], : flat.shape[1]].reshape(x.shape)


@functools.partial(jax.jit, static_argnames=("stages", "interpret", *core.STATIC))
def _triton_forward(q, k, v, *, stages: int, interpret: bool, **static):
    return _through_identity(core.attention(q, k, v, **static)[0], stages=stages, interpret=interpret)


@dataclasses.dataclass(frozen=True, eq=False)
class TritonCopy(LoweringCopy):
    """Right attention (float32, causal top-left, GQA) through a Triton kernel, 2 pipeline stages:
    the identity's chunks (64 rows x D float32) take 64 KiB of shared memory at D = 128."""

    STAGES: ClassVar[int] = 2
    name: str = "mutants_triton_copy"
    description: str = "JAX attention through a Pallas Triton kernel (x @ I in pipelined chunks)"

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities(), lowers_for="cuda")

    def _fn(self, inputs: AttentionInputs, spec: AttentionSpec, interpret: bool):
        static = {n: v for n, v in keywords(inputs, spec).items() if n in core.STATIC}
        return functools.partial(_triton_forward, stages=self.STAGES, interpret=interpret, **static)

    def lowering(self, inputs: AttentionInputs, spec: AttentionSpec, direction: str) -> LoweringCall:
        return LoweringCall(
            "cuda", self._fn(inputs, spec, interpret=False), abstract_arrays(inputs.q, inputs.k, inputs.v)
        )


@dataclasses.dataclass(frozen=True, eq=False)
class PipelinedTooDeep(TritonCopy):
    """BUG: 8 pipeline stages of the identity's chunks: 256 KiB of shared memory at D = 128, over
    Hopper's 227 KiB. Every number is right and it lowers; Triton would refuse it on the GPU."""

    STAGES: ClassVar[int] = 8
    name: str = "mutants_pipelined_too_deep"

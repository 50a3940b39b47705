"""A data race the numbers cannot show: right attention, copied out through a Pallas TPU kernel.

``RaceFreeCopy`` computes attention in plain JAX (``tests.mutants.jax_attention``) and copies
the output through a two-step Pallas TPU kernel whose grid axis is ``parallel``: with two
simulated cores each step runs on its own core, and each writes its own half of the output.

* ``RacyCopy``: both steps write the whole output. The values are the same, so every numeric
  check passes it, but two cores write one buffer with nothing ordering them (a TPU may tear
  the output). Only the ``races`` check, TPU interpret mode's race detector, rejects it.

Both run their kernel inside ``TpuExecution("tpu").context()``, which is where
``kernels.runtime.tpu_interpret.detect_races`` turns the detector on, and declare
``race_detection_declared``; they are unavailable where no detector can watch them (JAX < 0.7,
or a TPU, where the kernel would run natively).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from kernels.contract.base import Availability, Capabilities, SubjectGrads, SubjectOutput
from kernels.runtime.tpu_interpret import choose_execution, race_detection_declared, race_detection_missing
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core
from tests.mutants.correct import keywords

STEPS = 2  # grid steps of the copy: one per simulated core (RACE_DETECTION_CORES)


@functools.partial(jax.jit, static_argnames="racy")
def _copy(x: jax.Array, *, racy: bool) -> jax.Array:
    """x (any shape) through a ``STEPS``-step parallel Pallas TPU kernel: step i copies part i;
    ``racy``: every step copies (and writes) the whole array."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    flat = x.reshape(-1)
    pad = -flat.size % STEPS
    # [STEPS, 1, n]: a block's last two dims equal the array's, legal for any n.
    parts = jnp.pad(flat, (0, pad)).reshape(STEPS, 1, -1)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    if racy:  # BUG: every step's block is the whole array, so both cores write all of it
        spec = pl.BlockSpec(parts.shape, lambda i: (0, 0, 0))
    else:
        spec = pl.BlockSpec((1, *parts.shape[1:]), lambda i: (i, 0, 0))
    params = getattr(pltpu, "CompilerParams", None) or pltpu.TPUCompilerParams  # name before 0.6.2
    out = pl.pallas_call(
        kernel,
        grid=(STEPS,),
        in_specs=[spec],
        out_specs=spec,
        out_shape=jax.ShapeDtypeStruct(parts.shape, parts.dtype),
        compiler_params=params(dimension_semantics=("parallel",)),
    )(parts)
    return out.reshape(-1)[: flat.size].reshape(x.shape)


@dataclasses.dataclass(frozen=True, eq=False)
class RaceFreeCopy:
    """Right attention (float32, causal top-left, GQA), copied out race-free, one half per core."""

    RACY: ClassVar[bool] = False
    name: str = "mutants_race_free_copy"
    description: str = "JAX attention copied out through a Pallas TPU kernel, one half per core"

    def availability(self) -> Availability:
        execution = choose_execution("tpu")
        if not race_detection_declared(execution):
            why = race_detection_missing() or "on a TPU the copy runs natively, where none watches it"
            return Availability(
                False,
                "this subject exists to run under TPU interpret mode's race detector (JAX >= 0.7.0, "
                f"on CPU), and there is none here: {why}",
            )
        return Availability(True, "", (), execution.kind, execution.description)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            jax_runtime=True,
            dtypes=("float32",),
            causal_alignments=("top_left",),
            gqa=True,
            race_detection=race_detection_declared(choose_execution("tpu")),
        )

    def forward(self, inputs: AttentionInputs, spec: AttentionSpec) -> SubjectOutput:
        out, _ = core.call(core.attention, inputs.q, inputs.k, inputs.v, **keywords(inputs, spec))
        with choose_execution("tpu").context():
            out = _copy(out, racy=self.RACY)
        return SubjectOutput(out=core.host(out, inputs.q.dtype), ran=self.name)

    def gradients(self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray) -> SubjectGrads:
        raise NotImplementedError("no backward pass declared")


@dataclasses.dataclass(frozen=True, eq=False)
class RacyCopy(RaceFreeCopy):
    """The same copy with both steps writing the whole output: a write-write race across cores."""

    RACY: ClassVar[bool] = True
    name: str = "mutants_racy_copy"

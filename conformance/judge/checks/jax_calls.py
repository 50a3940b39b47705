"""The subject's JAX calls (``Adapter.jax_call``) as the checks that transform them (``vmap``,
``sharded``) get them, or why there are none for a case.

An adapter declares ``jax_call`` for the calls it can state as a function of batch-first arrays; one
case it cannot state so (an input baked into the function per batch row, an interpreter that cannot
run the transformed call) raises ``NotImplementedError`` naming why, and the check is ``unsupported``
with that reason: a declared limit of the adapter, not a finding. An exception from the transformed
call itself is the finding, and the checks catch it there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from conformance.judge.checks.base import CheckContext
from conformance.judge.dtypes import name_of

CANNOT_STATE = "the subject's JAX call (Adapter.jax_call) cannot state this case: {reason}"


def subject_calls(ctx: CheckContext) -> tuple[Any, Any] | str:
    """(forward call, gradients call or None where the case runs no backward), each a
    ``kernels.runtime.jax_runtime.JaxCall``; or the reason, where ``jax_call`` raised
    ``NotImplementedError`` for this case."""
    try:
        forward = ctx.adapter.jax_call(ctx.oracle.inputs, ctx.case.spec)
        gradients = (
            ctx.adapter.jax_call(ctx.oracle.inputs, ctx.case.spec, ctx.oracle.dout) if ctx.backward else None
        )
    except NotImplementedError as error:
        return CANNOT_STATE.format(reason=str(error).splitlines()[0] if str(error) else "NotImplementedError")
    return forward, gradients


@dataclasses.dataclass(frozen=True)
class Compared:
    """One tensor of a transformed call with what it is judged against: the float64 reference,
    the subject's own untransformed answer (the baseline), the floor's dtype, the valid rows and
    the cancellation magnitude, as the forward and backward checks judge it."""

    name: str
    got: Any
    ref: np.ndarray
    own: np.ndarray | None
    dtype: str
    valid: Any = None
    cancellation: float = 0.0


def forward_tensors(ctx: CheckContext, outputs: tuple[Any, ...]) -> list[Compared]:
    """out, and lse where declared, of a transformed forward call."""
    ref, run, valid = ctx.oracle.reference, ctx.run.forward, ctx.oracle.valid_rows
    floors_in = ctx.baseline  # the forward check's floor dtypes (fp8 inputs: out may be bf16)
    tensors = [Compared("out", outputs[0], ref.out, run.out, name_of(floors_in.out.dtype), valid[..., None])]
    if ctx.capabilities.lse:
        tensors.append(Compared("lse", outputs[1], ref.lse, run.lse, name_of(floors_in.lse.dtype), valid))
    return tensors


def gradient_tensors(ctx: CheckContext, grads: tuple[Any, ...]) -> list[Compared]:
    """dq, dk and dv of a transformed gradients call."""
    want, own, cancel = ctx.oracle.reference_grads, ctx.run.gradients, ctx.baseline_grads.cancellation
    return [
        Compared(
            name, grads[i], getattr(want, name), getattr(own, name), ctx.dtype, None, cancel.get(name, 0.0)
        )
        for i, name in enumerate(("dq", "dk", "dv"))
    ]

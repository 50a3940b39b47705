"""The subject's JAX calls (``Adapter.jax_call``) as the checks that transform them (``vmap``,
``sharded``) get them, or why there are none for a case.

An adapter declares ``jax_call`` for the calls it can state as a function of batch-first arrays; one
case it cannot state so (an input baked into the function per batch row, an interpreter that cannot
run the transformed call) raises ``NotImplementedError`` naming why, and the check is ``unsupported``
with that reason: a declared limit of the adapter, not a finding. An exception from the transformed
call itself is the finding, and the checks catch it there.
"""

from __future__ import annotations

from typing import Any

from conformance.judge.checks.base import CheckContext

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

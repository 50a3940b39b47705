"""``vmap``: the subject's call under ``jax.vmap``, as users batch a layer (per-example models,
ensembles, a vmapped decoder step), judged slice by slice against the float64 reference.

``jax.vmap`` goes through each primitive's batching rule: a ``pallas_call`` gains a grid axis,
a custom VJP is batched on both sides. A rule that drops, mixes or misplaces the new axis gives
answers that the unbatched call never shows. The leading axis stacks two requests: the case's
inputs, and the same inputs with the batch order reversed (every batch-first array flipped).
The second one's answer is the reference flipped the same way, so a rule that returns the first
slice twice, or one request's keys for another's queries, fails; a B = 1 case still shows a
dropped or misplaced axis. Both slices are judged against the float64 reference with the
subject's own unbatched answer as the baseline (``_slices``): vmap may change rounding (XLA
batches dots), never the answer; whether the unbatched answer is right is ``forward``'s verdict.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from conformance.judge.checks.base import CheckContext, Outcome, failed, from_judgements, unsupported
from conformance.judge.checks.jax_calls import Compared, forward_tensors, gradient_tensors, subject_calls
from conformance.judge.tolerance import Judgement, judge
from kernels.contract.optional_members import optional_member

NO_JAX_CALL = (
    "the subject exposes no JAX call (Adapter.jax_call): there is no function of JAX arrays "
    "to put under jax.vmap"
)
SLICES = ("slice 0", "slice 1, batch reversed")


def _flip(x: np.ndarray | None) -> np.ndarray | None:
    """The batch order reversed (axis 0); a broadcast batch axis of 1 stays as it is."""
    return None if x is None else np.flip(np.asarray(x), axis=0)


def _stack(args: tuple[Any, ...], batched: tuple[bool, ...]) -> tuple[Any, ...]:
    """Each array twice along a new leading axis: as given, then batch-reversed where batched."""
    import jax.numpy as jnp

    return tuple(
        None if a is None else jnp.stack([a, jnp.flip(a, axis=0) if flips else a])
        for a, flips in zip(args, batched, strict=True)
    )


def _vmapped(call: Any) -> tuple[tuple[Any, ...] | None, str | None]:
    """The subject's call (a ``JaxCall``) under ``jax.jit(jax.vmap(...))`` on the two stacked
    requests, as NumPy outputs, or the one line saying how vmap failed."""
    import jax

    stacked = _stack(call.args, call.batched)
    try:
        with call.context():
            outputs = jax.jit(jax.vmap(call.fn))(*stacked)
            return tuple(None if o is None else np.asarray(o) for o in outputs), None
    except Exception as error:  # noqa: BLE001 - a batching rule that raises is the finding
        first = str(error).splitlines()[0] if str(error) else ""
        return None, f"jax.vmap over the subject's call raised {type(error).__name__}: {first}"


def _slices(c: Compared) -> list[Judgement] | str:
    """Both slices of ``got`` judged against the reference (flipped for the second), with the
    subject's own unbatched answer as the baseline: vmap may round differently, by the same
    margin a same-dtype baseline gets, but may not make the answer worse than the call it batches.
    Where the unbatched call is itself far off (a known defect), the margin admits trivial
    answers, and the judgement is weak, so not judged: ``forward`` and ``backward`` report it."""
    name, got, ref, unbatched = c.name, c.got, c.ref, c.own
    expected = np.shape(ref)
    if got is None or np.shape(got) != (2, *expected):
        shape = None if got is None else np.shape(got)
        return f"{name} under vmap has shape {shape}, expected {(2, *expected)}"
    if unbatched is None or np.shape(unbatched) != expected:
        return f"{name}: the unbatched call gave no answer of shape {expected} to compare with"
    wants = ((ref, unbatched, c.valid), (_flip(ref), _flip(unbatched), _flip(c.valid)))
    judged = []
    for i, (label, (r, b, v)) in enumerate(zip(SLICES, wants, strict=True)):
        j = judge(name, got[i], r, b, c.dtype, v, c.cancellation)
        judged.append(
            dataclasses.replace(j, metrics=dataclasses.replace(j.metrics, tensor=f"{name} ({label})"))
        )
    return judged


def vmap(ctx: CheckContext) -> Outcome:
    """out (and lse where declared) of ``jax.vmap(call)`` over two stacked requests; where the case
    runs backward, dq, dk and dv of the vmapped gradients call too."""
    if not callable(optional_member(ctx.adapter, "jax_call")):
        return unsupported(NO_JAX_CALL)
    calls = subject_calls(ctx)
    if isinstance(calls, str):
        return unsupported(calls)
    forward_call, gradients_call = calls
    if forward_call.no_vmap:  # the context the call runs in cannot batch it (an interpreter's limit)
        return unsupported(forward_call.no_vmap)
    outputs, problem = _vmapped(forward_call)
    if problem:
        return failed(problem)
    results = [_slices(c) for c in forward_tensors(ctx, outputs)]
    if ctx.backward:
        grads, problem = _vmapped(gradients_call)
        if problem:
            return failed(problem)
        results += [_slices(c) for c in gradient_tensors(ctx, grads)]
    shapes = [r for r in results if isinstance(r, str)]
    if shapes:
        return failed("; ".join(shapes))
    return from_judgements([j for r in results for j in r])

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
HEAD_GROUPS = 2
HEADS_LABEL = f"heads in {HEAD_GROUPS} vmapped groups"
NO_HEAD_AXES = (
    "not put under jax.vmap along heads: the call does not say where its arrays keep their heads "
    "(JaxCall.heads: an input built from the case or a quantized leaf)"
)


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


def _run_vmapped(
    call: Any, args: tuple[Any, ...], in_axes: Any = 0, along: str = ""
) -> tuple[Any, str | None]:
    """The subject's call (a ``JaxCall``) under ``jax.jit(jax.vmap(..., in_axes))`` on ``args``,
    the mapped axis leading every output, as NumPy; or the one line saying how vmap failed."""
    import jax

    try:
        with call.context():
            outputs = jax.jit(jax.vmap(call.fn, in_axes=in_axes, out_axes=0))(*args)
            return tuple(None if o is None else np.asarray(o) for o in outputs), None
    except Exception as error:  # noqa: BLE001 - a batching rule that raises is the finding
        first = str(error).splitlines()[0] if str(error) else ""
        return None, f"jax.vmap{along} over the subject's call raised {type(error).__name__}: {first}"


def _vmapped(call: Any) -> tuple[tuple[Any, ...] | None, str | None]:
    """The call on the two stacked requests (``_stack``)."""
    return _run_vmapped(call, _stack(call.args, call.batched))


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
        judged.append(j.labelled(label))
    return judged


def _split_heads(call: Any, q_heads: int, kv_heads: int) -> tuple[tuple[Any, ...], tuple[Any, ...]] | str:
    """The call's arrays with each head axis of more than one head split into ``[HEAD_GROUPS, H /
    HEAD_GROUPS]`` there, and the ``in_axes`` that vmap over those groups (None for arrays without
    heads or with a broadcast one: a single kv head stays shared, as MQA); or why not."""
    if call.heads is None:
        return NO_HEAD_AXES
    if q_heads % HEAD_GROUPS or (kv_heads > 1 and kv_heads % HEAD_GROUPS):
        return (
            f"not put under jax.vmap along heads: {q_heads} query and {kv_heads} kv head(s) do not "
            f"split into {HEAD_GROUPS} groups"
        )
    import jax.numpy as jnp

    args, axes = [], []
    for a, axis in zip(call.args, call.heads, strict=True):
        if a is None or axis is None or a.shape[axis] == 1:
            args.append(a)
            axes.append(None)
            continue
        split = (*a.shape[:axis], HEAD_GROUPS, a.shape[axis] // HEAD_GROUPS, *a.shape[axis + 1 :])
        args.append(jnp.reshape(a, split))
        axes.append(axis)
    return tuple(args), tuple(axes)


def _merge_heads(groups: Any, split: bool) -> Any:
    """``[HEAD_GROUPS, B, H / HEAD_GROUPS, ...]`` -> ``[B, H, ...]``, the groups in order (``split``);
    an unsplit (shared) input's gradient is each group's contribution, summed in float64 and rounded
    once to its dtype, as the unbatched call sums it over every query head."""
    if groups is None:
        return None
    groups = np.asarray(groups)
    if not split:
        return groups.astype(np.float64).sum(axis=0).astype(groups.dtype)
    heads = np.moveaxis(groups, 0, 1)
    return heads.reshape(heads.shape[0], -1, *heads.shape[3:])


def _heads_judged(c: Compared) -> list[Judgement] | str:
    """A tensor merged back from its head groups, judged whole against the reference with the
    subject's own unbatched answer as the baseline (as ``_slices`` judges a slice)."""
    if c.got is None or np.shape(c.got) != np.shape(c.ref):
        shape = None if c.got is None else np.shape(c.got)
        return f"{c.name} under jax.vmap along heads has shape {shape}, expected {np.shape(c.ref)}"
    j = judge(c.name, c.got, c.ref, c.own, c.dtype, c.valid, c.cancellation)
    return [j.labelled(HEADS_LABEL)]


def _along_heads(
    ctx: CheckContext, forward_call: Any, gradients_call: Any
) -> list[list[Judgement] | str] | str:
    """The tensors of both calls under ``jax.vmap`` along heads, judged (``_heads_judged``); a str:
    why nothing was split (reported beside the verdict), or a failed call's line in the list."""
    hq, hkv = ctx.case.q_heads, ctx.case.kv_heads
    split = _split_heads(forward_call, hq, hkv)
    if isinstance(split, str):
        return split
    outputs, problem = _run_vmapped(forward_call, *split, along=" along heads")
    if problem:
        return [problem]
    merged = tuple(_merge_heads(o, True) for o in outputs)
    results: list[list[Judgement] | str] = [_heads_judged(c) for c in forward_tensors(ctx, merged)]
    if ctx.backward:
        split = _split_heads(gradients_call, hq, hkv)
        if isinstance(split, str):
            return results + [split]
        grads, problem = _run_vmapped(gradients_call, *split, along=" along heads")
        if problem:
            return results + [problem]
        kv = hkv > 1  # a single kv head stays shared: each group's dk and dv are summed
        merged = tuple(_merge_heads(g, s) for g, s in zip(grads[:3], (True, kv, kv), strict=True))
        results += [_heads_judged(c) for c in gradient_tensors(ctx, merged)]
    return results


def vmap(ctx: CheckContext) -> Outcome:
    """out (and lse where declared) of ``jax.vmap(call)`` over two stacked requests; where the case
    runs backward, dq, dk and dv of the vmapped gradients call too. Then the same tensors of the
    call under ``jax.vmap`` along heads (``in_axes`` at each head axis, the heads in two groups), as
    users batch per-head code, where the call says where its heads are (``JaxCall.heads``)."""
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
    heads = _along_heads(ctx, forward_call, gradients_call)
    note = heads if isinstance(heads, str) else ""
    if not isinstance(heads, str):
        results += heads
    shapes = [r for r in results if isinstance(r, str)]
    if shapes:
        return failed("; ".join(shapes))
    outcome = from_judgements([j for r in results for j in r])
    if note and outcome.verdict == "pass":
        return dataclasses.replace(outcome, reason="\n".join(filter(None, (outcome.reason, note))))
    return outcome

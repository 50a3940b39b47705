"""``sharded``: the subject's call under ``jax.jit`` with its inputs placed on a mesh of devices, as
users run a layer data- or model-parallel, judged against the float64 reference.

On CPU the devices are simulated: ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX
starts its backend (the suite's plugin sets 4 unless XLA_FLAGS names a count:
``conformance/suite/host_devices.py``). One device leaves nothing to shard: ``unsupported``,
with that fix in the reason.

One placement of the call, one more program per direction (``mesh_for``): a mesh of
batch x heads x sequence, the batch split first (data parallelism), then the query sequence
(context parallelism: q's queries, k's and v's keys), then heads, each as far as the devices
divide it; every batched 4-D array (``[B, H, S, ...]``: q, k, v, dout, a bias or mask with those
axes) is split along them, a batched array of another rank along its batch. With 4 devices a
batch of 2 gets batch 2 x sequence 2: both splits in one program, at the cost of one.
Placement never changes what ``jit`` computes, only how XLA partitions it, so a placement that
splits an array the call does not expect still asks the same question. What can go wrong is a
partitioning rule: a ``custom_partitioning`` or a ``shard_map`` inside the call that attends each
shard's queries to that shard's keys only, or reads a shard's local batch index, is right on one
device and wrong here.

Not judged: a query slice run alone through ``shard_map``. A ``JaxCall`` carries no query offset,
so a slice of a causal, windowed or padded case (offsets relative to the global row) would be a
different problem, not the same one split; splitting the sequence axis under ``jit`` asks the
partitioner to split that same global problem instead.

Every output is judged against the float64 reference with the subject's own unsharded answer as
the baseline (as ``vmap`` does): partitioning may round differently (a dot split over keys sums in
another order), never answer differently; whether the unsharded answer is right is ``forward``'s
and ``backward``'s verdict.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from conformance.judge.checks.base import CheckContext, Outcome, failed, from_judgements, unsupported
from conformance.judge.checks.jax_calls import Compared, forward_tensors, gradient_tensors, subject_calls
from conformance.judge.tolerance import Judgement, judge
from conformance.suite.host_devices import DEVICES, FLAG
from kernels.contract.optional_members import optional_member
from kernels.runtime.jax_runtime import MESH_AXES

NO_JAX_CALL = (
    "the subject exposes no JAX call (Adapter.jax_call): there is no function of JAX arrays "
    "to run on sharded inputs"
)
ONE_DEVICE = (
    f"this process has 1 JAX device, nothing to shard over: set XLA_FLAGS={FLAG}={DEVICES} before "
    "JAX starts (pytest conformance sets it unless XLA_FLAGS already names a device count)"
)
NOTHING_DIVIDES = (
    "this case's batch, query length and query heads share no factor with the {n} devices: nothing to split"
)


ARRAY_AXIS = {"batch": 0, "heads": 1, "sequence": 2}  # of a batched 4-D array, [B, H, S, ...]


@dataclasses.dataclass(frozen=True)
class Placement:
    """How the call's arrays lie on a mesh: its size along ``MESH_AXES`` (batch, heads, sequence).
    A batched 4-D array (``[B, H, S, ...]``) splits each of those axes over the mesh axis of that
    name, a batched array of another rank its axis 0 over ``batch``, wherever the mesh divides it;
    an unbatched one (shared by every request) stays whole on every device."""

    mesh_shape: tuple[int, int, int]

    @property
    def name(self) -> str:
        return ", ".join(f"{axis} {n}" for axis, n in zip(MESH_AXES, self.mesh_shape, strict=True) if n > 1)

    def spec(self, shape: tuple[int, ...], batched: bool) -> tuple[str | None, ...]:
        """The PartitionSpec entries for one array: a mesh axis where it divides the array's axis."""
        rule = ARRAY_AXIS if len(shape) == 4 else {"batch": 0}
        by_axis = {rule[a]: (a, n) for a, n in zip(MESH_AXES, self.mesh_shape, strict=True) if a in rule}
        entries = []
        for axis, size in enumerate(shape):
            name, n = by_axis.get(axis, (None, 1))
            entries.append(name if batched and n > 1 and size % n == 0 else None)
        return tuple(entries)


def _largest_divisor(n: int, of: int) -> int:
    """The largest divisor of ``n`` that divides ``of``."""
    return max(d for d in range(1, n + 1) if n % d == 0 and of % d == 0)


def mesh_for(devices: int, batch: int, q_heads: int, q_len: int) -> Placement | None:
    """The mesh this case gets on ``devices`` devices (pure: shapes in, a layout out), or None where
    nothing divides. The batch takes its share first (data parallelism, the common layout), then
    the query sequence (context parallelism), then heads from the devices left: with 4 devices a
    batch of 2 and 128 queries get 2 x 2, both splits in one program."""
    on_batch = _largest_divisor(devices, batch)
    on_sequence = _largest_divisor(devices // on_batch, q_len)
    on_heads = _largest_divisor(devices // (on_batch * on_sequence), q_heads)
    if on_batch * on_heads * on_sequence == 1:
        return None
    return Placement((on_batch, on_heads, on_sequence))


def _run_placed(call: Any, placement: Placement, own: bool, label: str) -> tuple[Any, str | None]:
    """The subject's call (a ``JaxCall``) under ``jax.jit`` on inputs placed as ``placement`` says,
    as NumPy outputs, or the one line saying how it failed (``label``: the placement, in words).
    ``own``: the call as the library shards it itself over the same mesh (``JaxCall.own_sharding``)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    size = math.prod(placement.mesh_shape)
    mesh = Mesh(np.array(jax.devices()[:size]).reshape(placement.mesh_shape), MESH_AXES)
    placed = tuple(
        None
        if a is None
        else jax.device_put(a, NamedSharding(mesh, PartitionSpec(*placement.spec(a.shape, batched))))
        for a, batched in zip(call.args, call.batched, strict=True)
    )
    try:
        with call.context():
            fn = call.own_sharding(mesh) if own else call.fn
            outputs = jax.jit(fn)(*placed)
            return tuple(None if o is None else np.asarray(o) for o in outputs), None
    except Exception as error:  # noqa: BLE001 - a partitioning rule that raises is the finding
        first = str(error).splitlines()[0] if str(error) else ""
        return None, f"the call on inputs sharded ({label}) raised {type(error).__name__}: {first}"


def _judged(c: Compared, placement: str) -> Judgement | str:
    """``got`` against the reference, with the unsharded answer as the baseline. Where that answer
    is itself far off (a known defect), the margin admits trivial answers and the judgement is
    weak, so not judged: ``forward`` and ``backward`` report it."""
    name, got, ref, unsharded = c.name, c.got, c.ref, c.own
    if got is None or np.shape(got) != np.shape(ref):
        shape = None if got is None else np.shape(got)
        return f"{name} sharded ({placement}) has shape {shape}, expected {np.shape(ref)}"
    if unsharded is None or np.shape(unsharded) != np.shape(ref):
        return f"{name}: the unsharded call gave no answer of shape {np.shape(ref)} to compare with"
    return judge(name, got, ref, unsharded, c.dtype, c.valid, c.cancellation).labelled(
        f"sharded: {placement}"
    )


def _placed(
    ctx: CheckContext, calls: tuple[Any, Any], placement: Placement, own: bool = False
) -> list[Judgement | str]:
    """Both calls' tensors on ``placement``, judged; ``own``: as the library shards them itself."""
    forward_call, gradients_call = calls
    label = f"{'own sharding, ' if own else ''}{placement.name}"
    outputs, problem = _run_placed(forward_call, placement, own, label)
    if problem:
        return [problem]
    results: list[Judgement | str] = [_judged(c, label) for c in forward_tensors(ctx, outputs)]
    if ctx.backward and (not own or gradients_call.own_sharding is not None):
        grads, problem = _run_placed(gradients_call, placement, own, label)
        if problem:
            return [*results, problem]
        results += [_judged(c, label) for c in gradient_tensors(ctx, grads)]
    return results


def sharded(ctx: CheckContext) -> Outcome:
    """out (and lse where declared) of the call on sharded inputs; where the case runs backward,
    dq, dk and dv of the gradients call on the same placement too."""
    if not callable(optional_member(ctx.adapter, "jax_call")):
        return unsupported(NO_JAX_CALL)
    import jax

    devices = jax.device_count()
    if devices < 2:
        return unsupported(ONE_DEVICE)
    chosen = mesh_for(devices, ctx.case.batch, ctx.case.q_heads, ctx.case.q_len)
    if chosen is None:
        return unsupported(NOTHING_DIVIDES.format(n=devices))
    calls = subject_calls(ctx)
    if isinstance(calls, str):
        return unsupported(calls)
    results = _placed(ctx, calls, chosen)
    if calls[0].own_sharding is not None:  # the library's own sharding entry, on the same mesh
        results += _placed(ctx, calls, chosen, own=True)
    problems = [r for r in results if isinstance(r, str)]
    if problems:
        return failed("; ".join(problems))
    return from_judgements([r for r in results if not isinstance(r, str)])

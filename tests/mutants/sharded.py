"""Sharded runs: a mutant right on one device whose partitioning rule attends each shard's queries
to that shard's keys only (a softmax normalised by the shard's local max and sum), the classic
context-parallel bug; ``vmap:VmapAdapter`` is its control (the same call, partitioned by XLA)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from kernels.runtime.jax_runtime import JaxCall
from reference.spec import AttentionInputs, AttentionSpec
from tests.mutants import jax_attention as core
from tests.mutants.correct import keywords
from tests.mutants.vmap import VmapAdapter, _forward


def _local_keys(fn: Any) -> Any:
    """``fn(q, k, v) -> (out, lse)`` whose partitioning keeps every operand's sharding and runs
    ``fn`` on each device's pieces: right when k and v are whole on every device (batch or head
    sharding), wrong when their sequence is split (each query sees its shard's keys only)."""
    call = custom_partitioning(fn)

    def result_shardings(mesh: Any, q_sharding: Any) -> tuple[NamedSharding, NamedSharding]:
        spec = tuple(q_sharding.spec) + (None,) * 4
        return NamedSharding(mesh, PartitionSpec(*spec[:4])), NamedSharding(mesh, PartitionSpec(*spec[:3]))

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        return result_shardings(mesh, arg_shapes[0].sharding)

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        # BUG: every operand keeps its sharding; k's and v's sequence split should be gathered first
        operands = tuple(a.sharding for a in arg_shapes)
        return mesh, fn, result_shardings(mesh, operands[0]), operands

    call.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer,
        sharding_rule="b h q d, b g k d, b g k e -> b h q e, b h q",
    )
    return call


def _vmapped_plainly(sharded: Any, plain: Any) -> Any:
    """``sharded`` itself, but under ``jax.vmap`` ``plain`` vmapped (``custom_partitioning`` has
    no batching rule): the mutant passes ``vmap``, so that ``sharded`` alone rejects it."""
    call = jax.custom_batching.custom_vmap(sharded)

    @call.def_vmap
    def rule(axis_size: int, in_batched: Any, *args: Any) -> Any:
        out = jax.vmap(plain, in_axes=tuple(0 if b else None for b in in_batched))(*args)
        return out, jax.tree.map(lambda _: True, out)

    return call


@dataclasses.dataclass(frozen=True, eq=False)
class LocalKeysWhenSharded(VmapAdapter):
    """Right on one device (and under vmap); sharded over the sequence, each device attends its
    queries to its own keys only."""

    name: str = "mutants_sharded_local_keys"
    description: str = "a partitioning rule that keeps the keys' sequence split: each shard sees its own keys"

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        if dout is not None:  # gradients: the control's (XLA partitions them correctly)
            return super().jax_call(inputs, spec, dout)
        static = {n: v for n, v in keywords(inputs, spec).items() if n in core.STATIC}
        args = tuple(jax.numpy.asarray(a) for a in (inputs.q, inputs.k, inputs.v))
        plain = functools.partial(_forward, **static)
        return JaxCall(_vmapped_plainly(_local_keys(plain), plain), args, (True,) * len(args))


def _shard_mapped(fn: Any, mesh: Any, sequence: bool) -> Any:
    """``fn(q, k, v) -> (out, lse)`` under ``jax.shard_map`` over ``mesh``: every array split by batch
    and heads, and where ``sequence`` q's queries and k's and v's keys too, each shard attending its
    queries to its own keys only (the classic context-parallel bug: right where the sequence stays
    whole, wrong wherever it is split, whatever the mask)."""
    seq = "sequence" if sequence else None
    return jax.shard_map(
        fn,
        mesh=mesh,
        in_specs=(
            PartitionSpec("batch", "heads", seq, None),
            PartitionSpec("batch", "heads", seq, None),
            PartitionSpec("batch", "heads", seq, None),
        ),
        out_specs=(PartitionSpec("batch", "heads", seq, None), PartitionSpec("batch", "heads", seq)),
        check_vma=False,
    )


@dataclasses.dataclass(frozen=True, eq=False)
class OwnShardingWholeSequence(VmapAdapter):
    """Control: a library whose own sharding entry (``JaxCall.own_sharding``) maps its call over the
    batch and heads, the sequence whole on every shard: right on any mesh."""

    name: str = "mutants_sharded_own_whole_sequence"
    description: str = "its own shard_map over batch and heads, the sequence whole"
    split_sequence: bool = False

    def jax_call(
        self, inputs: AttentionInputs, spec: AttentionSpec, dout: np.ndarray | None = None
    ) -> JaxCall:
        call = super().jax_call(inputs, spec, dout)
        if dout is not None:  # gradients: no own sharding
            return call
        static = {n: v for n, v in keywords(inputs, spec).items() if n in core.STATIC}
        plain = functools.partial(_forward, **static)
        own = functools.partial(_shard_mapped, plain, sequence=self.split_sequence)
        return dataclasses.replace(call, own_sharding=lambda mesh: own(mesh))


@dataclasses.dataclass(frozen=True, eq=False)
class OwnShardingLocalKeys(OwnShardingWholeSequence):
    """Its own sharding entry splits the sequence too (context parallelism) and attends each shard's
    queries to that shard's keys only. Under ``jit`` placement alone (XLA's partitioning) it is right."""

    name: str = "mutants_sharded_own_local_keys"
    description: str = "its own shard_map splits the sequence: each shard sees its own keys"
    split_sequence: bool = True  # BUG: no exchange of keys between sequence shards
